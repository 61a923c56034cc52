"""Runs scored by ROLL's LLM-as-judge reward (issue 36, decision 0039).

`api`: a real local OpenAI-compatible server (tests/trainer/rewards/judge_server.py) judges every sample of a
2-step tiny-model run; its answers ("Score: k", k = len(response) % 11) must be the rewards the run logged
and trained on, and the key, given as ${oc.env:…}, must reach the server and nowhere in the run directory.
`inference`: the reward section's own model judges; a tiny model taught to answer "Score: 7" must give every
sample ROLL's 7/10, and the sampled judge is reproducible with its seed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, FAST, events, metrics_by_step, run_local
from tests.trainer.rewards.judge_server import JudgeServer, judge_server, roll_score
from trainer.rewards.llm_judge import judge_messages

JUDGE_CLS = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
KEY = "sk-judge-run-5f1e9c"
SAMPLES_PER_STEP = 16  # FAST: 4 prompts x 4 responses


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with judge_server() as running:
        yield running


def judged(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None) -> Any:
    """The tiny demo run for 2 steps, scored only by the judge overrides describe; `env` is what ${oc.env:…}
    reads, as the trainer process resolves it."""
    from trainer.config import load_config

    return load_config(DEMO_GRPO, [*FAST, f"output_dir={tmp_path}", "max_steps=2", "eval_steps=0", "save_steps=100",
                                   "~rewards.synthetic", *overrides], env=env)


def test_an_api_judge_scores_the_trained_batch(tmp_path: Path, server: JudgeServer) -> None:
    cfg = judged(tmp_path, f"+rewards.judge.worker_cls={JUDGE_CLS}", "+rewards.judge.judge_model_type=api",
                 f"+rewards.judge.judge_api_url={server.base_url}", "+rewards.judge.judge_model_name=judge-7b",
                 "+rewards.judge.judge_api_key=${oc.env:POLICYLAB_TEST_JUDGE_KEY}",
                 "+rewards.judge.reward_kwargs.concurrency=4", env={"POLICYLAB_TEST_JUDGE_KEY": KEY})
    assert cfg.rewards["judge"].judge_api_key == KEY
    assert run_local(cfg) == 0

    assert len(server.received) == 2 * SAMPLES_PER_STEP
    assert {r["request"]["model"] for r in server.received} == {"judge-7b"}
    assert {r["authorization"] for r in server.received} == {f"Bearer {KEY}"}
    assert all("<prompt>\ncopy " in r["content"] and "Score: <number>" in r["content"] for r in server.received)

    samples = [s for e in events(tmp_path, "rollouts") for s in e["data"]["samples"]]
    assert len(samples) == 2 * SAMPLES_PER_STEP
    for s in samples:
        assert s["reward"] == pytest.approx(roll_score(len(s["response"]) % 11)), s["response"]
        reference = s["prompt"].split()[-1]  # "copy bad\n": the copy task's answer is the word
        assert any(f"<response>\n{s['response']}\n</response>" in r["content"]
                   and f"<reference>\n{reference}\n</reference>" in r["content"] for r in server.received)
    metrics = metrics_by_step(tmp_path)
    by_step: dict[int, list[float]] = {}
    for e in events(tmp_path, "rollouts"):
        by_step.setdefault(e["step"], []).extend(s["reward"] for s in e["data"]["samples"])
    for step, rewards in by_step.items():
        assert metrics[step]["reward/mean"] == pytest.approx(statistics.fmean(rewards), abs=1e-6)
    assert len({round(r, 3) for rs in by_step.values() for r in rs}) > 1  # the judge's scores differ

    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []


def test_the_reward_role_sends_what_the_section_says(tmp_path: Path, server: JudgeServer) -> None:
    from trainer.roles.reward import build_reward_fn

    cfg = judged(tmp_path, f"+rewards.judge.worker_cls={JUDGE_CLS}", "+rewards.judge.judge_model_type=api",
                 "+rewards.judge.judge_prompt=Qwen2.5-7B-Instruct-RLVR-prompt", "+rewards.judge.judge_model_name=m-2",
                 f"+rewards.judge.judge_api_url={server.base_url}", f"+rewards.judge.judge_api_key={KEY}",
                 "+rewards.judge.reward_kwargs.temperature=0")
    score = build_reward_fn(cfg)
    assert score(["copy bad\n", "copy bed\n"], ["bad", "bda"], [{"answer": "bad"}, {"answer": "bed"}]) == [1.0, 0.0]
    assert all("Reply with YES or NO only" in r["content"] and r["request"]["model"] == "m-2"
               and r["request"]["temperature"] == 0 and r["authorization"] == f"Bearer {KEY}" for r in server.received)
    with pytest.raises(ValueError, match=r"rewards.judge.reward_kwargs.judge_api_key: set by the reward section"):
        build_reward_fn(judged(tmp_path, "+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=api",
                               f"+rewards.judge.judge_api_url={server.base_url}", "+rewards.judge.judge_model_name=m",
                               "+rewards.judge.reward_kwargs.judge_api_key=x"))


def test_a_failing_judge_fails_the_run_naming_it(tmp_path: Path, server: JudgeServer) -> None:
    server.plan = [("status", 503)] * 100
    cfg = judged(tmp_path, "+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=api",
                 f"+rewards.judge.judge_api_url={server.base_url}", "+rewards.judge.judge_model_name=judge-7b",
                 "+rewards.judge.reward_kwargs.tries=2", "+rewards.judge.reward_kwargs.retry_wait_s=0")
    assert run_local(cfg) != 0
    text = (tmp_path / "events.jsonl").read_text()
    assert f"judge_api_url {server.base_url}/chat/completions: no judgment after 2 tries" in text
    assert "HTTP 503" in text


def test_the_tracker_never_sees_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.pipeline.run import telemetry
    from trainer.pipeline.runner import RunIdentity

    uploaded: dict[str, Any] = {}
    monkeypatch.setattr(telemetry, "build_tracker", lambda *a, config=None, **k: uploaded.update(config=config))
    cfg = judged(tmp_path, "+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=api",
                 "+rewards.judge.judge_api_url=https://judge.example/v1", "+rewards.judge.judge_model_name=m",
                 f"+rewards.judge.judge_api_key={KEY}")
    telemetry.open_emitter(cfg, RunIdentity(run_id="t")).close()
    assert uploaded["config"]["rewards"]["judge"]["judge_api_key"] == "<redacted>"
    assert KEY not in json.dumps(uploaded["config"])


# -- inference: the section's own model ---------------------------------------------------------------
@pytest.fixture(scope="module")
def score_7_judge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_score_7_judge(tmp_path_factory.mktemp("judge"))


def build_score_7_judge(out_dir: Path, size: str = "tiny") -> Path:
    """A tiny Qwen2 that answers any chat prompt with "Score: 7" (greedy), the judgment the inference run must
    read as ROLL's 7/10. Built, not trained (training on ~600-token judge prompts costs minutes here): every
    layer's attention and MLP output projections are zero, so a position's last hidden state is its own token's
    normalised embedding, and the untied output head maps "\n" -> "S" -> "c" -> … -> "7" -> <|im_end|>: a bigram
    model whose reply starts after the chat template's "assistant\n"."""
    import itertools

    import torch
    from transformers import AutoModelForCausalLM

    from trainer.models.loading import load_tokenizer
    from trainer.models.tiny import build_tiny_model

    path = build_tiny_model(out_dir, size=size, seed=5)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    chain = [*tokenizer("\nScore: 7", add_special_tokens=False)["input_ids"],
             tokenizer.convert_tokens_to_ids("<|im_end|>")]
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        hidden = model.model.norm(model.model.embed_tokens.weight.clone())
        head = torch.zeros_like(hidden)
        for current, following in itertools.pairwise(chain):
            head[following] = 50 * hidden[current] / hidden[current].norm()
    model.lm_head.weight = torch.nn.Parameter(head)
    model.config.tie_word_embeddings = False
    model.save_pretrained(path)
    return path


def test_an_inference_judge_scores_with_the_sections_own_model(tmp_path: Path, score_7_judge: Path) -> None:
    cfg = judged(tmp_path, "+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=inference",
                 f"+rewards.judge.model_args.model_name_or_path={score_7_judge}",
                 "+rewards.judge.generating_args.max_new_tokens=12", "+rewards.judge.generating_args.do_sample=false",
                 "+rewards.judge.infer_batch_size=8")
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert all(m["reward/mean"] == pytest.approx(0.7) for m in metrics.values()), metrics
    samples = [s for e in events(tmp_path, "rollouts") for s in e["data"]["samples"]]
    assert len(samples) == 2 * SAMPLES_PER_STEP and all(s["reward"] == pytest.approx(0.7) for s in samples)


def test_a_sampled_inference_judge_is_reproducible_with_its_seed(tmp_path: Path) -> None:
    from trainer.models.tiny import build_tiny_model
    from trainer.rewards.llm_judge import parse_judge_score
    from trainer.roles.reward import local_judge

    path = build_tiny_model(tmp_path / "judge", seed=3)
    conversations = [judge_messages(None, "copy bad", response, "bad") for response in ("bad", "abd", "bda")]

    def replies(seed: int) -> list[str]:
        cfg = judged(tmp_path, "+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=inference",
                     f"+rewards.judge.model_args.model_name_or_path={path}",
                     "+rewards.judge.generating_args.max_new_tokens=24",
                     "+rewards.judge.generating_args.temperature=1.0", f"+rewards.judge.generating_args.seed={seed}")
        return local_judge(cfg, "judge", cfg.rewards["judge"])(conversations)

    first, again, other = replies(11), replies(11), replies(12)
    assert first == again and first != other
    assert all(len(r) > 0 for r in first)
    # the random model's text parses as ROLL parses it: a score, a verdict, or nothing (then 0.0)
    assert all(parse_judge_score(r) is None or 0.0 <= parse_judge_score(r) <= 1.0 for r in first)
