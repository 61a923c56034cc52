"""Policy / value / entropy / SFT losses: hand values, metrics, masking and gradient flow."""

from __future__ import annotations

import math

import pytest
import torch
from algo_testing import FAST, batch_sizes, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given
from torch import Tensor

from trainer.algorithms.aggregation import LossAgg
from trainer.algorithms.policy_loss import (
    POLICY_LOSSES,
    actor_loss,
    entropy_from_logits,
    entropy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
    sft_loss,
    topr_policy_loss,
    value_loss,
)

SUM = LossAgg("token-sum")


def row(*values: float) -> Tensor:
    return torch.tensor([values], dtype=torch.float64)


def test_ppo_clip_and_dual_clip_by_hand() -> None:
    ratios = row(2.0, 2.0, 5.0, 0.5)
    advantages = row(1.0, -1.0, -1.0, -1.0)
    old = torch.zeros_like(ratios)
    mask = torch.ones_like(ratios)
    # per token: max(−A·r, −A·clip(r, 0.8, 1.2)) = −1.2, 2, 5, 0.8
    plain = ppo_policy_loss(ratios.log(), old, advantages, mask, agg=SUM)
    assert plain.loss.item() == pytest.approx(-1.2 + 2 + 5 + 0.8)
    assert plain.metrics["clipfrac"] == pytest.approx(0.5)  # tokens 0 and 3 take the clipped branch
    assert plain.metrics["ratio_mean"] == pytest.approx(2.375)
    assert plain.metrics["ratio_max"] == pytest.approx(5.0)
    expected_kl = sum(r - 1 - math.log(r) for r in (2.0, 2.0, 5.0, 0.5)) / 4
    assert plain.metrics["approx_kl"] == pytest.approx(expected_kl)
    # dual clip, c = 3: only the negative-advantage token with the huge ratio is capped at −c·A = 3
    dual = ppo_policy_loss(ratios.log(), old, advantages, mask, dual_clip_c=3.0, agg=SUM)
    assert dual.loss.item() == pytest.approx(-1.2 + 2 + 3 + 0.8)
    assert dual.metrics["clipfrac_lower"] == pytest.approx(0.25)
    # a positive advantage with a huge ratio is never dual-clipped
    positive = ppo_policy_loss(row(5.0).log(), row(0.0), row(1.0), row(1.0), dual_clip_c=3.0, agg=SUM)
    assert positive.loss.item() == pytest.approx(-1.2)
    assert positive.metrics["clipfrac_lower"] == 0.0


def test_clip_higher_is_asymmetric() -> None:
    args = (row(1.25, 0.7).log(), row(0.0, 0.0), row(1.0, -1.0), row(1.0, 1.0))
    symmetric = ppo_policy_loss(*args, clip_low=0.2, agg=SUM)
    assert symmetric.loss.item() == pytest.approx(-1.2 + 0.8)
    higher = ppo_policy_loss(*args, clip_low=0.2, clip_high=0.28, agg=SUM)
    assert higher.loss.item() == pytest.approx(-1.25 + 0.8)
    lower = ppo_policy_loss(*args, clip_low=0.4, clip_high=0.2, agg=SUM)
    assert lower.loss.item() == pytest.approx(-1.2 + 0.7)


def test_ppo_rejects_bad_clip_values() -> None:
    args = (row(0.0), row(0.0), row(1.0), row(1.0))
    with pytest.raises(ValueError, match="clip_ratio_c"):
        ppo_policy_loss(*args, dual_clip_c=1.0)
    with pytest.raises(ValueError, match="pg_clip_low / pg_clip_high"):
        ppo_policy_loss(*args, clip_low=-0.1)
    with pytest.raises(ValueError, match="shape mismatch"):
        ppo_policy_loss(row(0.0, 0.0), *args[1:])


def test_gspo_uses_the_geometric_mean_ratio() -> None:
    log_probs = row(-1.0, -2.0, 0.0).requires_grad_()
    old = row(-1.1, -2.3, 0.0)
    mask = row(1.0, 1.0, 0.0)
    advantages = row(1.0, 1.0, 1.0)
    s = math.exp(0.2)  # exp(mean(0.1, 0.3))
    wide = gspo_policy_loss(log_probs, old, advantages, mask, clip_low=0.3, clip_high=0.3)
    assert wide.loss.item() == pytest.approx(-s)  # seq-mean-token-mean over one sequence
    (grad,) = torch.autograd.grad(wide.loss, log_probs)
    torch.testing.assert_close(grad, row(-s / 2, -s / 2, 0.0))  # value s, gradient through each token
    narrow = gspo_policy_loss(log_probs, old, advantages, mask)  # paper's ε: clipped at 1 + 4e-4
    assert narrow.loss.item() == pytest.approx(-(1 + 4e-4))
    assert narrow.metrics["clipfrac"] == 1.0


def test_topr_truncates_only_negative_samples() -> None:
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, 0.0], [-0.5, 0.0]], dtype=torch.float64)
    old = torch.tensor([[-3.0, -3.0], [-0.5 - math.log(0.5), 0.0], [-0.5 + 2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-2.0, -2.0]], dtype=torch.float64)
    scores = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    out = topr_policy_loss(log_probs, old, advantages, mask, scores, agg=SUM)
    # positive: weight 1 whatever the ratio (here e^3): −1·(−1) − 1·(−2) = 3
    # negative with π/μ = 0.5: −0.5·(−1)·(−0.5) = −0.25 ; negative with π/μ = e^−2: −e^−2·(−2)·(−0.5)
    assert out.loss.item() == pytest.approx(3 - 0.25 - math.exp(-2))
    assert out.metrics["negative_weight_mean"] == pytest.approx((0.5 + math.exp(-2)) / 2)
    assert out.metrics["positive_fraction"] == pytest.approx(1 / 3)
    big = topr_policy_loss(row(0.0), row(-5.0), row(-1.0), row(1.0), torch.tensor([0.0]), agg=SUM)
    assert big.loss.item() == pytest.approx(0.0)  # negative, ratio e^5 truncated to 1: −1·(−1)·0


def test_sft_loss_is_nll_on_positive_samples() -> None:
    log_probs = torch.tensor([[-1.0, -3.0], [-5.0, -7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    assert sft_loss(log_probs, mask, torch.tensor([True, False])).item() == pytest.approx(2.0)
    assert sft_loss(log_probs, mask, torch.tensor([True, True])).item() == pytest.approx(3.0)
    assert sft_loss(log_probs, mask, torch.tensor([False, False])).item() == 0.0


def test_entropy_from_logits() -> None:
    uniform = torch.zeros(1, 1, 4)
    assert entropy_from_logits(uniform).item() == pytest.approx(math.log(4))
    logits = torch.randn(3, 5, 7, generator=generator(1))
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)
    mask = torch.tensor([[1, 1, 0, 0, 0]] * 3)
    assert entropy_loss(entropy_from_logits(logits), mask).item() == pytest.approx(float(expected[:, :2].mean()), rel=1e-6)


def test_value_loss_clipped_and_unclipped_by_hand() -> None:
    values, old, returns, mask = row(1.5, 0.9), row(1.0, 1.0), row(2.0, 2.0), row(1.0, 1.0)
    clipped = value_loss(values, old, returns, mask, value_clip=0.2)
    # token 0: max((1.5−2)², (1.2−2)²) = 0.64 ; token 1: within the clip, (0.9−2)² = 1.21
    assert clipped.loss.item() == pytest.approx(0.5 * (0.64 + 1.21) / 2)
    assert clipped.metrics["vf_clipfrac"] == pytest.approx(0.5)
    plain = value_loss(values, old, returns, mask)
    assert plain.loss.item() == pytest.approx(0.5 * (0.25 + 1.21) / 2)
    with pytest.raises(ValueError, match="value_clip"):
        value_loss(values, old, returns, mask, value_clip=-1.0)


def test_actor_loss_combines_the_terms() -> None:
    total = actor_loss(
        torch.tensor(1.0),
        rl_loss_coef=0.5,
        sft=torch.tensor(2.0),
        sft_loss_coef=0.1,
        kl=torch.tensor(3.0),
        kl_loss_coef=0.01,
        entropy=torch.tensor(4.0),
        entropy_loss_coef=0.001,
    )
    assert total.item() == pytest.approx(0.5 + 0.2 + 0.03 - 0.004)
    assert actor_loss(torch.tensor(2.0)).item() == 2.0
    with pytest.raises(ValueError, match=r"kl_loss_coef=0\.1 but its loss term"):
        actor_loss(torch.tensor(1.0), kl_loss_coef=0.1)


def all_losses(
    log_probs: Tensor, old: Tensor, adv: Tensor, mask: Tensor, scores: Tensor, logits: Tensor
) -> dict:
    return {
        "ppo": ppo_policy_loss(log_probs, old, adv, mask, dual_clip_c=3.0).loss,
        "ppo_seq": ppo_policy_loss(log_probs, old, adv, mask, agg=LossAgg("seq-mean-token-sum-norm")).loss,
        "gspo": gspo_policy_loss(log_probs, old, adv, mask, clip_low=0.2).loss,
        "topr": topr_policy_loss(log_probs, old, adv, mask, scores).loss,
        "sft": sft_loss(log_probs, mask, scores > 0),
        "value": value_loss(log_probs, old, adv, mask, value_clip=0.2).loss,
        "entropy": entropy_loss(entropy_from_logits(logits), mask),
    }


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_masked_inputs_change_nothing_and_get_no_gradient(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    log_probs = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 2
    old = log_probs + 0.1 * torch.randn(batch, length, generator=g, dtype=torch.float64)
    adv = torch.randn(batch, length, generator=g, dtype=torch.float64)
    scores = torch.randn(batch, generator=g, dtype=torch.float64)
    logits = torch.randn(batch, length, 5, generator=g, dtype=torch.float64)
    clean = all_losses(log_probs, old, adv, mask, scores, logits)
    noisy_lp = perturb_masked(log_probs, mask, g).requires_grad_()
    # Logits at padding come from the model: wild but finite (see entropy_loss).
    wild_logits = 1e3 * torch.randn(logits.shape, generator=g, dtype=torch.float64)
    noisy_logits = torch.where(mask.unsqueeze(-1), logits, wild_logits).requires_grad_()
    noisy = all_losses(
        noisy_lp, perturb_masked(old, mask, g), perturb_masked(adv, mask, g), mask, scores, noisy_logits
    )
    for name, loss in noisy.items():
        assert torch.isfinite(loss), name
        torch.testing.assert_close(loss, clean[name], rtol=1e-12, atol=1e-12, msg=name)
        inputs = noisy_logits if name == "entropy" else noisy_lp
        (grad,) = torch.autograd.grad(loss, inputs)
        assert torch.isfinite(grad).all(), name
        assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask])), name


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_gradient_reaches_every_real_token_on_policy(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    log_probs = (-torch.rand(batch, length, generator=g, dtype=torch.float64) - 0.1).requires_grad_()
    adv = torch.randn(batch, length, generator=g, dtype=torch.float64).sign()  # ±1, never 0
    scores = torch.ones(batch, dtype=torch.float64)
    for name in POLICY_LOSSES:
        extra = (scores,) if name.startswith("topr") else ()
        loss = POLICY_LOSSES[name](
            log_probs, log_probs.detach(), adv, mask, *extra
        ).loss  # ratio 1: unclipped
        (grad,) = torch.autograd.grad(loss, log_probs)
        assert (grad[mask] != 0).all(), name
        assert (grad[~mask] == 0).all(), name


def test_empty_mask_losses_are_zero() -> None:
    zeros = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.zeros(2, 3)
    out = all_losses(zeros, zeros, zeros + 1, mask, torch.ones(2), torch.zeros(2, 3, 4))
    for name, loss in out.items():
        assert loss.item() == 0.0, name
    metrics = ppo_policy_loss(zeros, zeros, zeros, mask, dual_clip_c=3.0).metrics
    assert all(math.isfinite(v) for v in metrics.values())
