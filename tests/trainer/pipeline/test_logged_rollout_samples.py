"""`logged_rollout_samples`: every sample of a step reaches telemetry by default, and the knob caps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import events, load_cfg, run_local


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
