"""ROLL's two TOPR spellings (Le Roux et al. 2025, arXiv 2503.14286), checked against hand
calculations of ROLL's formulas (`compute_topr_pg_loss_mat_and_metrics` for `pg_variant: topr`, and
the `use_topr_neg_loss_coef` term of its ActorWorker.loss_func), not against the code under test."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms.aggregation import LossAgg
from trainer.algorithms.policy_loss import actor_loss, topr_negative_loss, topr_token_policy_loss

SUM = LossAgg("token-sum")


def _batch() -> tuple[torch.Tensor, ...]:
    """Sample 0 positive (score 1, ratios e^2 and e^1: never truncated); sample 1 negative (score 0)
    with ratios 0.5 and e^2 (truncated to 1); sample 2 negative with one real token, ratio e^-1."""
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -1.0], [-0.2, -9.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-3.0, -3.0], [-0.5 - math.log(0.5), -3.0], [0.8, 0.0]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-2.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    scores = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    return log_probs, old, advantages, mask, scores


def test_topr_token_values_and_gradient_follow_rolls_formula() -> None:
    log_probs, old, advantages, mask, scores = _batch()
    out = topr_token_policy_loss(log_probs, old, advantages, mask, scores, positive_weight=2.0,
                                 negative_weight=0.5, agg=SUM)
    # positive: w₊·(−A·log π) = 2·(1 + 2) = 6, whatever the ratio
    # negative, sample 1: w₋·(−clip(r)·A·log π) = 0.5·(−0.5·(−1)·(−0.5) − 1·(−1)·(−1)) = 0.5·(−1.25)
    # negative, sample 2: 0.5·(−e^−1·(−2)·(−0.2)); its padded token adds nothing
    expected = 6 - 0.625 - 0.5 * math.exp(-1) * 0.4
    assert out.loss.item() == pytest.approx(expected)
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    # ∂l/∂log π = −w·A·(truncated ratio, no gradient through it)
    torch.testing.assert_close(grad, torch.tensor([[-2.0, -2.0], [0.25, 0.5], [math.exp(-1), 0.0]],
                                                  dtype=torch.float64))
    assert out.metrics["positive_fraction"] == pytest.approx(1 / 3)
    assert out.metrics["negative_clipfrac"] == pytest.approx(1 / 3)  # 1 of 3 negative tokens has r > 1


def test_topr_token_token_mean_divides_by_every_real_token() -> None:
    log_probs, old, advantages, mask, scores = _batch()
    ones = topr_token_policy_loss(log_probs, old, advantages, mask, scores)
    summed = topr_token_policy_loss(log_probs, old, advantages, mask, scores, agg=SUM)
    assert ones.loss.item() == pytest.approx(summed.loss.item() / 5)


def test_topr_token_weights_act_on_their_own_sign_only() -> None:
    log_probs, old, advantages, mask, scores = _batch()
    base = topr_token_policy_loss(log_probs, old, advantages, mask, scores, agg=SUM).loss.item()
    no_negative = topr_token_policy_loss(log_probs, old, advantages, mask, scores, negative_weight=0.0,
                                         agg=SUM).loss.item()
    no_positive = topr_token_policy_loss(log_probs, old, advantages, mask, scores, positive_weight=0.0,
                                         agg=SUM).loss.item()
    assert no_negative == pytest.approx(3.0)  # the positive sample alone
    assert no_positive == pytest.approx(base - 3.0)


def test_topr_negative_term_is_rolls_use_topr_neg_loss_coef_term() -> None:
    log_probs, old, advantages, mask, scores = _batch()
    term = topr_negative_loss(log_probs, old, advantages, mask, scores)
    # ROLL: agg_loss(−clip(r, 0, 1)·log π·A, mask·[score ≤ 0], token-mean): the 3 negative tokens
    assert term.item() == pytest.approx((-0.25 - 1.0 - math.exp(-1) * 0.4) / 3)
    total = actor_loss(torch.tensor(1.0, dtype=torch.float64), topr_negative=term, use_topr_neg_loss_coef=0.5)
    assert total.item() == pytest.approx(1.0 + 0.5 * term.item())
    with pytest.raises(ValueError, match="use_topr_neg_loss_coef"):
        actor_loss(torch.tensor(1.0), use_topr_neg_loss_coef=0.5)


def test_topr_negative_term_is_zero_without_negative_samples() -> None:
    log_probs, old, advantages, mask, _ = _batch()
    assert topr_negative_loss(log_probs, old, advantages, mask, torch.ones(3, dtype=torch.float64)).item() == 0.0
