"""KL estimators, KL in the reward, KL loss, KL controllers."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from algo_testing import FAST, batch_sizes, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given

from trainer.algorithms.aggregation import LossAgg
from trainer.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    add_kl_to_rewards,
    kl_full,
    kl_loss,
    make_kl_controller,
    scores_to_token_rewards,
    token_kl,
)

LOG_HALF, LOG_QUARTER = math.log(0.5), math.log(0.25)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kl", math.log(2)),  # log 0.5 − log 0.25
        ("abs", math.log(2)),
        ("mse", 0.5 * math.log(2) ** 2),
        ("low_var_kl", 0.5 + math.log(2) - 1),  # d = −log 2: e^d − d − 1
    ],
)
def test_estimators_at_known_log_probs(name: str, expected: float) -> None:
    log_probs = torch.tensor([[LOG_HALF]], dtype=torch.float64)
    ref = torch.tensor([[LOG_QUARTER]], dtype=torch.float64)
    got = token_kl(name, torch.ones(1, 1), log_probs=log_probs, ref_log_probs=ref)
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_k1_is_signed_and_abs_is_not() -> None:
    log_probs, ref = torch.tensor([[LOG_QUARTER]]), torch.tensor([[LOG_HALF]])
    assert KL_ESTIMATORS["kl"](log_probs, ref).item() == pytest.approx(-math.log(2))
    assert KL_ESTIMATORS["abs"](log_probs, ref).item() == pytest.approx(math.log(2))


def test_low_var_kl_is_clamped_like_verl() -> None:
    big = KL_ESTIMATORS["low_var_kl"](torch.tensor([0.0]), torch.tensor([30.0]))  # e^20 − 21 → 10
    assert big.item() == 10.0
    assert KL_ESTIMATORS["low_var_kl"](torch.tensor([0.0]), torch.tensor([-3.0])).item() == pytest.approx(
        math.exp(-3) + 2
    )


def test_full_kl_matches_the_definition() -> None:
    p, q = torch.tensor([0.5, 0.25, 0.25]), torch.tensor([0.25, 0.5, 0.25])
    expected = float((p * (p / q).log()).sum())  # = 0.25·log 2
    got = kl_full(p.log().view(1, 1, 3) + 7.0, q.log().view(1, 1, 3) - 2.0)  # logits up to a shift
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.25 * math.log(2))
    masked = token_kl(
        "full", torch.zeros(1, 1), logits=p.log().view(1, 1, 3), ref_logits=q.log().view(1, 1, 3)
    )
    assert masked.item() == 0.0


def test_token_kl_errors_name_what_is_missing() -> None:
    with pytest.raises(ValueError, match="valid: kl, abs, mse, low_var_kl, full"):
        token_kl("k9", torch.ones(1, 1), log_probs=torch.zeros(1, 1), ref_log_probs=torch.zeros(1, 1))
    with pytest.raises(ValueError, match="`logits` and `ref_logits`"):
        token_kl("full", torch.ones(1, 1), log_probs=torch.zeros(1, 1), ref_log_probs=torch.zeros(1, 1))
    with pytest.raises(ValueError, match="`log_probs` and `ref_log_probs`"):
        token_kl("kl", torch.ones(1, 1))


def test_scores_land_on_the_last_real_token() -> None:
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    got = scores_to_token_rewards(torch.tensor([2.0, 3.0, 4.0]), mask)
    assert got.tolist() == [[0, 2, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]]


def test_kl_in_reward_by_hand() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 99.0]], dtype=torch.float64)
    rewards, mean_kl = add_kl_to_rewards(
        torch.tensor([1.0, -1.0], dtype=torch.float64), kl, mask, kl_coef=0.5
    )
    expected = torch.tensor([[-0.05, -0.1, 0.85], [-0.2, -1.25, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(rewards, expected)
    assert mean_kl == pytest.approx((0.2 + 0.45) / 2)


def test_kl_loss_aggregates_k3() -> None:
    log_probs = torch.tensor([[LOG_HALF, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[LOG_QUARTER, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0]])
    assert kl_loss(log_probs, ref, mask).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert kl_loss(log_probs, ref, mask, "kl", LossAgg("token-sum")).item() == pytest.approx(math.log(2))


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_kl_ignores_masked_positions_and_their_gradients(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    log_probs = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 3
    ref = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 3
    for name in ("kl", "abs", "mse", "low_var_kl"):
        clean = token_kl(name, mask, log_probs=log_probs, ref_log_probs=ref)
        noisy_lp = perturb_masked(log_probs, mask, g).requires_grad_()
        noisy = token_kl(name, mask, log_probs=noisy_lp, ref_log_probs=perturb_masked(ref, mask, g))
        assert torch.equal(clean, noisy), name
        noisy.sum().backward()
        assert torch.equal(noisy_lp.grad[~mask], torch.zeros_like(noisy_lp.grad[~mask])), name


def test_adaptive_controller_after_one_step() -> None:
    controller = AdaptiveKLController(value=0.2, target=6.0, horizon=10000)
    high = controller.update(current_kl=12.0, n_steps=64)  # error clipped to +0.2
    assert high.value == pytest.approx(0.2 * (1 + 0.2 * 64 / 10000))
    low = controller.update(current_kl=4.5, n_steps=100)  # error −0.25 clipped to −0.2
    assert low.value == pytest.approx(0.2 * (1 - 0.2 * 100 / 10000))
    mid = controller.update(current_kl=6.6, n_steps=100)  # error +0.1
    assert mid.value == pytest.approx(0.2 * (1 + 0.1 * 100 / 10000))
    assert controller.value == 0.2  # pure: the old state is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        controller.value = 1.0  # type: ignore[misc]


def test_fixed_controller_and_factory() -> None:
    fixed = make_kl_controller(0.05)
    assert isinstance(fixed, FixedKLController)
    assert fixed.update(100.0, 10).value == 0.05
    adaptive = make_kl_controller(0.1, target_kl=0.5, kl_horizon=100)
    assert isinstance(adaptive, AdaptiveKLController)
    assert adaptive.update(1.0, 10).value == pytest.approx(0.1 * 1.02)
    with pytest.raises(ValueError, match="target_kl"):
        make_kl_controller(0.1, target_kl=0.0)
    with pytest.raises(ValueError, match="kl_horizon"):
        make_kl_controller(0.1, target_kl=1.0, kl_horizon=0)
    with pytest.raises(ValueError, match="init_kl_coef"):
        make_kl_controller(-0.1)
