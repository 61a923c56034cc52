"""Off-policy correction of stale samples: importance ratios, TIS, masking, staleness weights (by hand)."""

from __future__ import annotations

import math

import pytest
import torch
from algo_testing import FAST, batch_sizes, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given

from trainer.algorithms.off_policy import (
    importance_ratio_stats,
    importance_ratios,
    masked_importance_keep,
    staleness_weights,
    truncated_importance_weights,
)


def test_ratios_truncation_and_mask_by_hand() -> None:
    # π_old / μ per token: 0.5/0.25 = 2, 0.3/0.5 = 0.6, 0.3/0.3 = 1, 0.9/0.1 = 9, a masked token whose
    # log-probs are garbage, 0.1/0.5 = 0.2
    old = torch.tensor([[0.5, 0.3, 0.3, 0.9, float("nan"), 0.1]]).log()
    behaviour = torch.tensor([[0.25, 0.5, 0.3, 0.1, 0.7, 0.5]]).log()
    mask = torch.tensor([[1, 1, 1, 1, 0, 1]])
    ratios = importance_ratios(old, behaviour, mask)
    assert ratios[0].tolist() == pytest.approx([2.0, 0.6, 1.0, 9.0, 1.0, 0.2])  # masked: exactly 1, never NaN
    tis = truncated_importance_weights(ratios, mask, cap=1.5)
    assert tis[0].tolist() == pytest.approx([1.5, 0.6, 1.0, 1.5, 0.0, 0.2])
    keep = masked_importance_keep(ratios, mask, cap=2.5)  # band [0.4, 2.5]
    assert keep[0].tolist() == [True, True, True, False, False, False]
    stats = importance_ratio_stats(ratios, mask, cap=2.5)
    assert stats["is_ratio_mean"] == pytest.approx((2.0 + 0.6 + 1.0 + 9.0 + 0.2) / 5)
    assert (stats["is_ratio_min"], stats["is_ratio_max"]) == (pytest.approx(0.2), pytest.approx(9.0))
    assert stats["is_ratio_above_cap"] == pytest.approx(1 / 5)  # 9
    assert stats["is_ratio_outside_band"] == pytest.approx(2 / 5)  # 9 and 0.2
    assert importance_ratio_stats(ratios, torch.zeros_like(mask), cap=2.0) == {}


def test_an_extreme_log_ratio_is_clamped_not_inf() -> None:
    ratios = importance_ratios(torch.tensor([[0.0, -500.0]]), torch.tensor([[-500.0, 0.0]]), torch.ones(1, 2))
    assert ratios[0].tolist() == pytest.approx([math.exp(20.0), math.exp(-20.0)])
    assert truncated_importance_weights(ratios, torch.ones(1, 2), cap=3.0)[0].tolist() == pytest.approx(
        [3.0, math.exp(-20.0)])


def test_staleness_weights_by_hand() -> None:
    staleness = torch.tensor([0, 1, 2, 3, 5])
    # bound 1, λ = 0.5: weight 1 within the bound, then 0.5 per version beyond it
    assert staleness_weights(staleness, 1, 0.5).tolist() == [1.0, 1.0, 0.5, 0.25, 0.0625]
    assert staleness_weights(staleness, 1, 0.0).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]  # λ = 0 is a drop
    assert staleness_weights(staleness, 9, 0.3).tolist() == [1.0] * 5


@pytest.mark.parametrize(("call", "message"), [
    (lambda: truncated_importance_weights(torch.ones(1, 1), torch.ones(1, 1), cap=1.0), "off_policy_cap"),
    (lambda: masked_importance_keep(torch.ones(1, 1), torch.ones(1, 1), cap=0.5), "off_policy_cap"),
    (lambda: staleness_weights(torch.zeros(1), -1, 0.5), "max_staleness"),
    (lambda: staleness_weights(torch.zeros(1), 1, 1.5), "stale_sample_decay"),
])
def test_bad_parameters_name_the_knob(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_masked_positions_never_change_a_result(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    old, behaviour = -torch.rand(batch, length, generator=g) * 3, -torch.rand(batch, length, generator=g) * 3
    reference = importance_ratios(old, behaviour, mask)
    wild = importance_ratios(perturb_masked(old, mask, g), perturb_masked(behaviour, mask, g), mask)
    assert torch.equal(reference, wild)
    tis = truncated_importance_weights(wild, mask, cap=2.0)
    assert torch.isfinite(tis).all() and bool((tis[~mask] == 0).all()) and bool((tis <= 2.0).all())
    assert not masked_importance_keep(wild, mask, cap=2.0)[~mask].any()
