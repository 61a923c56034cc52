"""`logged_rollout_samples`: every sample of a step reaches telemetry by default, and the knob caps it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local
from trainer.pipeline.rlvr import RLVRPipeline
from trainer.rollout.base import Generation


@pytest.mark.parametrize(("overrides", "expected"), [((), 32), (("logged_rollout_samples=5",), 5)],
                         ids=["default-every-sample", "capped"])
def test_rollout_samples_sent_per_step(tmp_path: Path, overrides: tuple[str, ...], expected: int) -> None:
    # 8 prompts x 4 samples = 32 samples per step, twice the 16 the trainer used to send
    cfg = load_cfg(tmp_path, "max_steps=1", "rollout_batch_size=8", "eval_steps=0", "save_steps=100", *overrides)
    assert run_local(cfg) == 0
    (rollouts,) = events(tmp_path, "rollouts")
    samples = rollouts["data"]["samples"]
    assert len(samples) == expected
    assert len({(s["group_id"], s["sample_index"]) for s in samples}) == expected
    for sample in samples:  # one advantage per response token (the loss mask's), their mean the sample's
        assert len(sample["token_advantages"]) == len(sample["tokens"]) == sample["response_length"] > 0
        mean = sum(sample["token_advantages"]) / len(sample["token_advantages"])
        assert sample["advantage"] == pytest.approx(mean, abs=1e-5)
    assert len({round(s["advantage"], 4) for s in samples}) > 1  # GRPO: groups differ (not all zero)
    # the demo recomputes old log-probs (2 updates per rollout): each sample carries the trainer's beside the
    # engine's, token for token, and their largest gap is the one the step's metric measured over every sample
    gaps = [abs(t - e) for s in samples for t, e in zip(s["token_logprobs_trainer"], s["token_logprobs"], strict=True)]
    assert all(len(s["token_logprobs_trainer"]) == len(s["tokens"]) for s in samples)
    logged_max = metrics_by_step(tmp_path)[1]["rollout/logprob_diff_max"]
    assert max(gaps) <= logged_max + 1e-5
    if expected == 32:
        assert max(gaps) == pytest.approx(logged_max, abs=1e-5)


def test_a_logged_sample_keeps_only_its_real_tokens_advantages() -> None:
    """Responses of different lengths (padding past the shorter ones, an empty one): each sample's token
    advantages are its masked positions only and its advantage is their mean (0 with none)."""
    sent: list[list[dict]] = []
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda ids: [f"t{i}" for i in ids])
    emitter = SimpleNamespace(rollouts=lambda samples, step: sent.append(samples))
    pipeline = SimpleNamespace(cfg=SimpleNamespace(logged_rollout_samples=3), tokenizer=tokenizer, emitter=emitter)
    gens = [Generation(0, 0, [5, 6, 7], [-0.1, -0.2, -0.3], "length"), Generation(0, 1, [8], [-0.4], "stop"),
            Generation(1, 0, [], [], "stop"), Generation(1, 1, [9], [-0.5], "stop")]
    records = [{"prompt": "p0", "input_ids": [1, 2]}, {"prompt": "p1", "input_ids": [3]}]
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [9.0, 9.0, 9.0], [5.0, 9.0, 9.0]])
    RLVRPipeline.emit_rollouts(pipeline, 7, records, gens, ["abc", "d", "", "e"], torch.tensor([1.0, 0.0, 0.5, 1.0]),
                               advantages, mask)
    (samples,) = sent
    assert len(samples) == 3  # logged_rollout_samples
    assert [s["token_advantages"] for s in samples] == [[1.0, 2.0, 3.0], [4.0], []]
    assert [s["advantage"] for s in samples] == [pytest.approx(2.0), pytest.approx(4.0), 0.0]
    assert [s["tokens"] for s in samples] == [["t5", "t6", "t7"], ["t8"], []]
    assert [(s["group_id"], s["sample_index"], s["prompt"], s["prompt_length"]) for s in samples] == [
        (0, 0, "p0", 2), (0, 1, "p0", 2), (1, 0, "p1", 1)]


def test_a_logged_sample_carries_the_trainers_log_probs_of_its_own_tokens() -> None:
    """actor_train's log-probs ([B, width], right-padded responses) go with each sample as far as its tokens
    go; with use_rollout_log_probs the loss never kept them, and samples carry the engine's alone."""
    sent: list[list[dict]] = []
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda ids: [f"t{i}" for i in ids])
    emitter = SimpleNamespace(rollouts=lambda samples, step: sent.append(samples))
    pipeline = SimpleNamespace(cfg=SimpleNamespace(logged_rollout_samples=8, use_rollout_log_probs=False),
                               tokenizer=tokenizer, emitter=emitter)
    gens = [Generation(0, 0, [5, 6], [-0.1, -0.2], "stop"), Generation(0, 1, [7], [-0.4], "stop")]
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    old_log_probs = torch.tensor([[-0.125, -0.25], [-0.5, -7.0]])  # the learner's (LearnResult.old_log_probs)
    trainer = RLVRPipeline.trainer_log_probs(pipeline, old_log_probs)
    RLVRPipeline.emit_rollouts(pipeline, 1, [{"prompt": "p", "input_ids": [1]}], gens, ["ab", "c"],
                               torch.tensor([1.0, 0.0]), torch.zeros(2, 2), mask, trainer_log_probs=trainer)
    (samples,) = sent
    assert [s["token_logprobs_trainer"] for s in samples] == [[-0.125, -0.25], [-0.5]]
    assert [s["token_logprobs"] for s in samples] == [[-0.1, -0.2], [-0.4]]
    pipeline.cfg.use_rollout_log_probs = True
    assert RLVRPipeline.trainer_log_probs(pipeline, torch.zeros(2, 2)) is None
