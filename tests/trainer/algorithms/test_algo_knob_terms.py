"""The algorithm-side pieces of issue 11's knobs: kl_ctrl_type, verl's ppo_kl / pg_clipfrac_lower,
per-sample loss weights, and the loop's sample mask and weights (hand-computed values)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from trainer.algorithms.kl import AdaptiveKLController, FixedKLController, make_kl_controller
from trainer.algorithms.policy_loss import gspo_policy_loss, ppo_policy_loss
from trainer.pipeline.rewarding import RewardSpec, sample_mask, sample_weights


def test_kl_ctrl_type_selects_the_controller() -> None:
    assert make_kl_controller(0.1, target_kl=0.5, ctrl_type="fixed") == FixedKLController(0.1)
    assert make_kl_controller(0.1, target_kl=0.5, kl_horizon=7, ctrl_type="adaptive") == AdaptiveKLController(
        0.1, 0.5, 7)
    # unset follows ROLL: adaptive exactly when target_kl is set
    assert isinstance(make_kl_controller(0.1, target_kl=0.5), AdaptiveKLController)
    assert isinstance(make_kl_controller(0.1), FixedKLController)
    with pytest.raises(ValueError, match="target_kl"):
        make_kl_controller(0.1, ctrl_type="adaptive")
    with pytest.raises(ValueError, match="kl_ctrl_type"):
        make_kl_controller(0.1, target_kl=0.5, ctrl_type="linear")


def test_ppo_kl_is_mean_old_minus_new_log_prob() -> None:
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    new = torch.tensor([[-1.5, -1.0, -9.0]])  # the third token is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = ppo_policy_loss(new, old, torch.ones(1, 3), mask)
    assert out.metrics["ppo_kl"] == pytest.approx(((-1.0 + 1.5) + (-2.0 + 1.0)) / 2)
    assert out.metrics["clipfrac_lower"] == 0.0  # no dual clip: the lower bound applies nowhere
    gspo = gspo_policy_loss(new, old, torch.ones(1, 3), mask)
    assert gspo.metrics["ppo_kl"] == pytest.approx(-0.25)


def test_sample_weights_scale_each_sample_in_the_aggregation() -> None:
    # ratio 1 everywhere: the per-token loss is −A; token-mean over 3 real tokens
    adv = torch.tensor([[1.0, 1.0], [4.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    zeros = torch.zeros(2, 2)
    plain = ppo_policy_loss(zeros, zeros, adv, mask).loss
    weighted = ppo_policy_loss(zeros, zeros, adv, mask, sample_weights=torch.tensor([2.0, 0.5])).loss
    assert float(plain) == pytest.approx(-(1 + 1 + 4) / 3)
    assert float(weighted) == pytest.approx(-(2 * 1 + 2 * 1 + 0.5 * 4) / 3)


def _cfg(**knobs: Any) -> RewardSpec:
    return RewardSpec(**knobs)  # the others at the schema's defaults


def test_sample_mask_keeps_groups_inside_the_thresholds() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])  # group means 1, 0.5, 0
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    keep, metrics = sample_mask(_cfg(difficulty_mask=True), scores, groups)
    assert keep.tolist() == [False, False, True, True, False, False]
    assert metrics["actor/difficulty_mask_ratio"] == pytest.approx(1 / 3)
    off, _ = sample_mask(_cfg(), scores, groups)
    assert off.all()
    # nothing would remain: keep everything (ROLL's fallback)
    everything, metrics = sample_mask(_cfg(difficulty_mask=True, difficulty_high_threshold=0.4), scores, groups)
    assert everything.all() and metrics["actor/difficulty_mask_ratio"] == 0.0


def test_the_fallback_never_readmits_groups_the_query_filter_dropped() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])  # group means 1, 0.5, 0
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    passing = torch.tensor([False, False, True, True, False, False])  # a std_filter at 0: group 1 only
    # the difficulty mask (0.6 < mean < 1) drops group 1 as well: the fallback keeps what passed the query filter
    kept, _ = sample_mask(_cfg(difficulty_mask=True, difficulty_low_threshold=0.6), scores, groups, query_filter=passing)
    assert kept.tolist() == passing.tolist()
    # no group passes: nothing is kept (the actor does not step), not the whole batch
    none, metrics = sample_mask(_cfg(), scores, groups, query_filter=torch.zeros(6, dtype=torch.bool))
    assert not none.any() and metrics["actor/final_mask_ratio"] == 0.0 and metrics["actor/query_filter_mask_ratio"] == 0.0


def test_sample_weights_follow_roll() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert sample_weights(_cfg(), mask, None) is None
    by_length = sample_weights(_cfg(length_loss_weight=True), mask, None)
    raw = torch.tensor([0.5, 1.5, 1.0])  # 1.5 − (len − 1)/(3 − 1)
    assert torch.allclose(by_length, raw * 3 / raw.sum())
    both = sample_weights(_cfg(length_loss_weight=True, difficulty_loss_weight=True), mask,
                          torch.tensor([1.0, 0.0, 0.5]))
    raw = raw * torch.tensor([2.0, 0.5, 1.25])  # 0.5 + 1.5·d
    assert torch.allclose(both, raw * 3 / raw.sum())
    assert math.isclose(float(both.mean()), 1.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match="difficulty"):
        sample_weights(_cfg(difficulty_loss_weight=True), mask, None)
