"""ROLL's cluster LLM judge: the top-level `reward_model` section is a worker group of its own (trainer.roles.
judge_server) and an llm_judge reward with judge_model_type cluster sends it its judge prompts.

How it fails: let the cluster judge fall back to the reward section's own model (it has none here: the run
fails), drop the group from the runner (the reward role refuses), or send the reward_model's decoding instead of
the judge section's (the recorded params differ).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.importers.test_foreign_corpus import CORPUS
from tests.trainer.pipeline.conftest import events, metrics_by_step, run_local
from tests.trainer.pipeline.test_llm_judge_run import SAMPLES_PER_STEP, build_score_7_judge, judged
from trainer.cluster.worker_group import shard_batch
from trainer.rewards.llm_judge import judge_messages

SERVER_FILE = CORPUS / "roll/qwen2.5-7B-rlvr_megatron/rlvr_config_8gpus_llm_as_judge_server.yaml"
CLUSTER = ("+rewards.judge.reward_type=llm_judge", "+rewards.judge.judge_model_type=cluster")


def test_a_cluster_judge_scores_through_the_reward_model_group(tmp_path: Path) -> None:
    judge = build_score_7_judge(tmp_path / "judge")
    cfg = judged(
        tmp_path / "run",
        *CLUSTER,
        "+rewards.judge.generating_args.max_new_tokens=12",
        "+rewards.judge.generating_args.do_sample=false",
        f"+reward_model.model_args.model_name_or_path={judge}",
        "+reward_model.strategy_args.strategy_name=hf_infer",
        "+reward_model.infer_batch_size=8",
    )
    assert cfg.rewards["judge"].model_args.model_name_or_path is None  # only the group has the judge model
    assert run_local(cfg) == 0
    out = tmp_path / "run"
    metrics = metrics_by_step(out)
    assert sorted(metrics) == [1, 2]
    assert all(m["reward/mean"] == pytest.approx(0.7) for m in metrics.values()), metrics
    samples = [s for e in events(out, "rollouts") for s in e["data"]["samples"]]
    assert len(samples) == 2 * SAMPLES_PER_STEP and all(s["reward"] == pytest.approx(0.7) for s in samples)
    phases = [e["data"]["message"] for e in events(out, "status")]
    assert phases.index("loading model: reward_model") < phases.index("loading model: reward")


class RecordingGroup:
    """A reward_model group of `world_size` ranks: each shard answered by its rank, every call recorded."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.calls: list[tuple[list[Any], Any]] = []

    def call_sharded(self, method: Any, batch: dict[str, Any], **kwargs: Any) -> list[list[str]]:
        assert method.__name__ == "judge"
        shards = shard_batch(batch, self.world_size)
        self.calls += [(s["conversations"], kwargs["params"]) for s in shards]
        return [
            [f"rank {r}: " + (c[0]["content"][-3:] if c else "") for c in s["conversations"]]
            for r, s in enumerate(shards)
        ]


def test_the_client_spreads_the_prompts_over_the_ranks_in_order_with_the_judges_decoding(
    tmp_path: Path,
) -> None:
    from trainer.roles.reward import cluster_judge

    cfg = judged(
        tmp_path,
        *CLUSTER,
        "+rewards.judge.generating_args.max_new_tokens=5",
        "+reward_model.model_args.model_name_or_path=unused",
        "+reward_model.generating_args.max_new_tokens=9",
    )
    group = RecordingGroup(world_size=3)
    generate = cluster_judge(cfg, "judge", cfg.rewards["judge"], group)  # type: ignore[arg-type]
    conversations = [[{"role": "user", "content": f"q{i:02d}"}] for i in range(4)]
    assert generate(conversations) == ["rank 0: q00", "rank 0: q01", "rank 1: q02", "rank 1: q03"]
    assert [len(c) for c, _ in group.calls] == [2, 2, 2] and group.calls[2][0] == [
        [],
        [],
    ]  # padding, not judged
    assert {p.max_new_tokens for _, p in group.calls} == {
        5
    }  # the judge section's generating_args, as ROLL sends
    cfg.rewards["judge"].generating_args = None
    cluster_judge(cfg, "judge", cfg.rewards["judge"], group)(conversations[:1])  # type: ignore[arg-type]
    assert group.calls[-1][1].max_new_tokens == 9  # else the reward_model's own
    with pytest.raises(
        ValueError, match=r"rewards\.judge\.judge_model_type: cluster asks the reward_model group"
    ):
        cluster_judge(cfg, "judge", cfg.rewards["judge"], None)


def test_a_rank_skips_the_padding() -> None:
    from trainer.roles.judge_server import JudgeServerWorker

    worker = JudgeServerWorker.__new__(JudgeServerWorker)
    asked: list[Any] = []
    worker.replies = lambda conversations, params: (
        asked.extend(conversations) or ["Score: 7"] * len(conversations)
    )
    conversation = judge_messages(None, "copy bad", "bad", "bad")
    assert worker.judge({"conversations": [conversation, []]}, params=None) == ["Score: 7", ""]  # type: ignore[arg-type]
    assert asked == [conversation]


# -- validation ----------------------------------------------------------------------------------------------
def issues(*overrides: str) -> tuple[dict[str, str], dict[str, str], Any]:
    from trainer.config import validate_config

    result = validate_config(SERVER_FILE, list(overrides))
    return ({i.path: i.message for i in result.errors}, {i.path: i.message for i in result.warnings}, result)


def test_roll_s_judge_server_file_validates_as_shipped_with_a_two_rank_judge_group() -> None:
    errors, warnings, result = issues()
    assert errors == {}
    assert result.config.rewards["llm_judge"].judge_model_type == "cluster"
    assert (
        result.derived["reward_model.world_size"] == 2 and result.derived["reward_model.strategy"] == "vllm"
    )
    assert not [
        p for p in warnings if p.startswith(("reward_model.model_args", "reward_model.strategy_args"))
    ]


def test_the_judge_group_is_checked_like_every_role() -> None:
    errors, _, _ = issues("num_nodes=1", "reward_model.device_mapping=[8,9]")
    assert "device ids [8, 9] are outside the cluster" in errors["reward_model.device_mapping"], errors
    errors, _, _ = issues("reward_model.device_mapping=[6,6]")
    assert "more than once" in errors["reward_model.device_mapping"], errors
    errors, _, _ = issues("~reward_model")
    assert (
        "override rewards.llm_judge.judge_model_type=inference"
        in errors["rewards.llm_judge.judge_model_type"]
    )
    errors, _, _ = issues(
        "reward_model.strategy_args.strategy_name=sglang", "~reward_model.strategy_args.strategy_config"
    )
    assert (
        "reward_model.strategy_args.strategy_name=vllm" in errors["reward_model.strategy_args.strategy_name"]
    )
    _, warnings, _ = issues("rewards.llm_judge.judge_model_type=inference")
    assert "no llm_judge reward has judge_model_type: cluster" in warnings["reward_model"]
