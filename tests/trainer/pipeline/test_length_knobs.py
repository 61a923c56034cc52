"""ROLL's length knobs act in the tiny GRPO loop (issue 36): `max_len_mask`, `error_max_len_clip` and a
reward's `response_length_penalty_coef`. Same seed, one step: the expected numbers come from the run's
own rollouts and ROLL's rules written out here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local

ONE_STEP = ("max_steps=1", "eval_steps=0", "save_steps=1000", "response_length=6")


def _run(out: Path, *overrides: str) -> tuple[dict[str, float], list[dict]]:
    assert run_local(load_cfg(out, *ONE_STEP, *overrides)) == 0
    return metrics_by_step(out)[1], events(out, "rollouts")[0]["data"]["samples"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], list[dict]]:
    return _run(tmp_path_factory.mktemp("baseline"))


def test_max_len_mask_drops_responses_at_the_generation_limit(tmp_path: Path, baseline) -> None:
    metrics, samples = _run(tmp_path, "max_len_mask=true")
    below_limit = [s["response_length"] < 6 for s in samples]
    assert [s["stop_reason"] == "length" for s in samples] == [not b for b in below_limit]
    assert metrics["actor/max_len_mask_ratio"] == pytest.approx(sum(below_limit) / len(samples))
    assert "actor/max_len_mask_ratio" not in baseline[0]


def test_error_max_len_clip_keeps_right_answers_and_short_wrong_ones(tmp_path: Path, baseline) -> None:
    metrics, samples = _run(tmp_path, "error_max_len_clip=true", "error_max_len_threshold=5")
    kept = [s["reward"] == 1 or (s["reward"] == 0 and s["response_length"] < 5) for s in samples]
    assert metrics["actor/error_len_mask_ratio"] == pytest.approx(sum(kept) / len(samples))
    assert metrics["reward/mean"] == baseline[0]["reward/mean"]  # the same rollouts
    assert "actor/error_len_mask_ratio" not in baseline[0]


def test_response_length_penalty_shifts_the_processed_reward(tmp_path: Path, baseline) -> None:
    metrics, samples = _run(tmp_path, "rewards.synthetic.response_length_penalty_coef=0.4")
    assert all(s["response_length"] < 100 for s in samples)  # ρ = −0.5 below 100 tokens
    assert metrics["reward/mean"] == baseline[0]["reward/mean"]  # raw scores untouched (masks, TOPR read them)
    assert metrics["reward/normalized_mean"] == pytest.approx(baseline[0]["reward/normalized_mean"] - 0.4 * 0.5, abs=1e-6)
