"""`logged_rollout_samples`: every sample of a step reaches telemetry by default, and the knob caps it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.trainer.pipeline.conftest import events, load_cfg, run_local
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
