"""A run over a GSM8K-style file, scored by the math_rule reward, completes and reports rollouts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import redis

from tests.trainer.pipeline.conftest import REPO_ROOT, events, load_cfg, metrics_by_step
from trainer.pipeline.runner import RunIdentity, run_training

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "gsm8k_mini.jsonl"


def test_gsm8k_file_with_math_rule_reward(tmp_path: Path, redis_url: str) -> None:
    cfg = load_cfg(
        tmp_path,
        "max_steps=2", "eval_steps=0", "save_steps=100", "prompt_length=256", "response_length=8",
        "~actor_train.data_args.synthetic",
        f"actor_train.data_args.file_name={FIXTURE}",
        "actor_train.data_args.prompt=question",
        "actor_train.data_args.response=answer",
        "actor_train.data_args.template=native",
        "~rewards.synthetic",
        "+rewards.math.reward_type=math_rule",
        "+rewards.math.reward_kwargs.last_number_fallback=true",
    )
    assert cfg.rewards["math"].reward_type == "math_rule"
    run_id = f"rlvr-gsm8k-{uuid.uuid4().hex[:8]}"
    assert run_training(cfg, RunIdentity(run_id, 2, redis_url), backend="local", log=lambda line: None) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert all(0.0 <= m["reward/mean"] <= 1.0 for m in metrics.values())
    samples = [s for e in events(tmp_path, "rollouts") for s in e["data"]["samples"]]
    assert samples and all("<|im_start|>user" in s["prompt"] for s in samples)
    questions = {line.split('"question": "')[1].split('"')[0] for line in FIXTURE.read_text().splitlines()}
    assert all(any(q in s["prompt"] for q in questions) for s in samples)
    assert events(tmp_path, "status")[-1]["data"]["state"] == "succeeded"
    # the same events went to the run's Redis Stream (--events-redis / POLICYLAB_EVENTS_REDIS_URL)
    client = redis.Redis.from_url(redis_url)
    key = f"policylab:run:{run_id}:events"
    try:
        streamed = [json.loads(fields[b"event"]) for _, fields in client.xrange(key)]
        assert [e["seq"] for e in streamed] == [e["seq"] for e in events(tmp_path)]
        assert all(e["attempt"] == 2 for e in streamed)
    finally:
        client.delete(key)


def test_math_rule_route_scores_a_correct_answer() -> None:
    """The reward routing the run uses gives 1 to a right final answer and 0 to a wrong one."""
    from trainer.config import PipelineConfig
    from trainer.roles.reward import build_reward_fn

    cfg = PipelineConfig.model_validate({"rewards": {"math": {"reward_type": "math_rule"}}})
    score = build_reward_fn(cfg)
    sample = {"answer": "Tom has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"}
    assert score(["q", "q"], ["so #### 7", "#### 8"], [sample, sample]) == [1.0, 0.0]
