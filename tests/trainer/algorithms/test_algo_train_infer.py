"""Training–inference mismatch correction (ROLL's train_infer_correction) and the plain PG objective, checked
against numbers worked out by hand from the formulas (trainer/algorithms/train_infer.py docstring) and against
a literal per-row loop like ROLL's `compute_segment_masked_mean`."""

from __future__ import annotations

import math

import pytest
import torch
from algo_testing import FAST, batch_sizes, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given

from trainer.algorithms.policy_loss import pg_policy_loss, ppo_policy_loss
from trainer.algorithms.train_infer import (
    MismatchFilter,
    MismatchWeight,
    band_keep,
    correct_mismatch,
    importance_weights,
    level_reduce,
    mismatch_prob_diffs,
    mismatch_ratios,
    segment_ids,
)

# Row 0: two segments (tokens 0-1, token 3); π_old/μ = 2, 1, ·, 0.5; π_old − μ = 0.2, 0, ·, −0.2.
# Row 1: one segment; π_old/μ = 1.8, 1.2, 1, 1.6; π_old − μ = 0.4, 0.1, 0, 0.3. Masked entries are garbage.
MU = torch.tensor([[0.2, 0.5, 0.7, 0.4, 0.1], [0.5, 0.5, 0.5, 0.5, 0.5]]).log()
OLD = torch.tensor([[0.4, 0.5, float("nan"), 0.2, 0.3], [0.9, 0.6, 0.5, 0.8, float("inf")]]).log()
MASK = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 1, 0]])
GEO_1 = (1.8 * 1.2 * 1.0 * 1.6) ** 0.25  # 1.3635…


def test_segments_are_runs_of_real_tokens() -> None:
    assert segment_ids(torch.tensor([[1, 1, 0, 1, 0, 1, 1], [0, 0, 0, 0, 0, 0, 0]])).tolist() == [
        [1, 1, 0, 2, 0, 3, 3], [0] * 7]


@pytest.mark.parametrize(("level", "ratios", "diffs"), [
    ("token", [[2.0, 1.0, 1.0, 0.5, 1.0], [1.8, 1.2, 1.0, 1.6, 1.0]],
     [[0.2, 0.0, 0.0, -0.2, 0.0], [0.4, 0.1, 0.0, 0.3, 0.0]]),
    # exp(mean log ρ): row 0 (ln 2 + 0 + ln 0.5)/3 = 0; δ mean 0; row 1 the 4th root of 3.456, δ mean 0.2
    ("geometric", [[1.0, 1.0, 1.0, 1.0, 1.0], [GEO_1] * 4 + [1.0]],
     [[0.0, 0.0, 0.0, 0.0, 0.0], [0.2, 0.2, 0.2, 0.2, 0.0]]),
    # exp(Σ log ρ): row 0 2·1·0.5 = 1, row 1 1.8·1.2·1·1.6 = 3.456; δ sums 0 and 0.8
    ("sequence", [[1.0, 1.0, 1.0, 1.0, 1.0], [3.456] * 4 + [1.0]],
     [[0.0, 0.0, 0.0, 0.0, 0.0], [0.8, 0.8, 0.8, 0.8, 0.0]]),
    # row 0: segment 1 exp((ln 2 + 0)/2) = √2, δ 0.1; segment 2 0.5, δ −0.2; row 1 as geometric
    ("segment", [[math.sqrt(2), math.sqrt(2), 1.0, 0.5, 1.0], [GEO_1] * 4 + [1.0]],
     [[0.1, 0.1, 0.0, -0.2, 0.0], [0.2, 0.2, 0.2, 0.2, 0.0]]),
])
def test_ratios_and_differences_at_each_level_by_hand(level: str, ratios: list, diffs: list) -> None:
    assert mismatch_ratios(OLD, MU, MASK, level).tolist() == [pytest.approx(r, rel=1e-5) for r in ratios]
    assert mismatch_prob_diffs(OLD, MU, MASK, level).tolist() == [pytest.approx(d, abs=1e-6) for d in diffs]


def test_weight_truncation_and_filters_by_hand() -> None:
    # token weight, U = 1.5: clamp(ρ, 0, 1.5); 3 of the 7 real tokens (2, 1.8, 1.6) exceed U
    out = correct_mismatch(OLD, MU, MASK, weight=MismatchWeight("token", 1.5), filters=(
        MismatchFilter("token", ratio_band=(0.8, 1.25)),  # keeps ρ = 1 (row 0), 1.2 and 1 (row 1): 3 of 7
        MismatchFilter("sequence", ratio_band=None, diff_band=(-0.1, 0.5)),  # δ sums 0 / 0.8: row 0 only
    ))
    assert out.weights.tolist() == [pytest.approx([1.5, 1.0, 0.0, 0.5, 0.0]), pytest.approx([1.5, 1.2, 1.0, 1.5, 0.0])]
    assert out.keep.tolist() == [[False, True, False, False, False], [False] * 5]
    assert out.metrics == pytest.approx({
        "is_weight_clipfrac": 3 / 7,
        "train_infer_is_weight_mean": (1.5 + 1 + 0.5 + 1.5 + 1.2 + 1 + 1.5) / 7,
        "train_infer_is_weight_max": 1.5,
        "train_infer_token_ratio_mask_mean": 3 / 7,
        "train_infer_ratio_token_mean": ((2 + 1 + 0.5) / 3 + (1.8 + 1.2 + 1 + 1.6) / 4) / 2,  # seq-mean-token-mean
        "train_infer_sequence_diff_mask_mean": 3 / 7,
        "train_infer_diff_sequence_mean": (0.0 + 0.8) / 2,
        "train_infer_final_mask_mean": 1 / 7,
        "train_infer_masked_fraction": 6 / 7,
    })


def test_without_a_weight_or_filters_nothing_changes() -> None:
    out = correct_mismatch(OLD, MU, MASK)
    assert out.weights.tolist() == MASK.float().tolist() and torch.equal(out.keep, MASK.bool())
    assert out.metrics == {}
    untruncated = importance_weights(mismatch_ratios(OLD, MU, MASK, "sequence"), MASK, upper_bound=None)
    assert untruncated[1, 0].item() == pytest.approx(3.456)
    assert correct_mismatch(OLD, MU, torch.zeros_like(MASK), weight=MismatchWeight()).metrics == {}


def test_a_huge_sequence_ratio_is_clamped_not_inf() -> None:
    old, mu = torch.zeros(1, 40), torch.full((1, 40), -1.0)  # Σ log ρ = 40 → e^20 after the clamp
    assert mismatch_ratios(old, mu, torch.ones(1, 40), "sequence")[0, 0].item() == pytest.approx(math.exp(20.0))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: importance_weights(torch.ones(1, 1), torch.ones(1, 1), upper_bound=0.0), "upper_bound"),
    (lambda: band_keep(torch.ones(1, 1), torch.ones(1, 1), 1.2, 0.8), "empty"),
    (lambda: level_reduce(torch.ones(1, 1), torch.ones(1, 1), "turn"), "level"),  # type: ignore[arg-type]
])
def test_bad_arguments_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def roll_segment_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ROLL's compute_segment_masked_mean written as its per-row loop over runs of 1s (an independent reading)."""
    out = torch.zeros_like(values)
    for b in range(mask.size(0)):
        t = 0
        while t < mask.size(1):
            if not mask[b, t]:
                t += 1
                continue
            end = t
            while end < mask.size(1) and mask[b, end]:
                end += 1
            out[b, t:end] = values[b, t:end].mean()
            t = end
    return out


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_segment_level_matches_a_per_row_loop_and_ignores_padding(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    old = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 3
    mu = -torch.rand(batch, length, generator=g, dtype=torch.float64) * 3
    want = torch.where(mask, roll_segment_mean(old - mu, mask).exp(), torch.ones_like(old))
    got = mismatch_ratios(old, mu, mask, "segment")
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mismatch_ratios(perturb_masked(old, mask, g), perturb_masked(mu, mask, g), mask,
                                               "segment"), got)
    contiguous = ragged_mask(g, batch, length, holes=False)  # one segment per row: segment = geometric
    torch.testing.assert_close(mismatch_ratios(old, mu, contiguous, "segment"),
                               mismatch_ratios(old, mu, contiguous, "geometric"))


def test_pg_loss_is_minus_advantage_times_log_prob_by_hand() -> None:
    """l = −A·log π, token-mean: (−1·ln 0.5 − (−2)·ln 0.25)/2 = (0.6931 − 2.7726)/2; ∂/∂log π = −A/N whatever π_old."""
    log_probs = torch.tensor([[0.5, 0.25]]).log().requires_grad_()
    old = torch.tensor([[0.4, 0.5]]).log()  # r = 1.25, 0.5: PPO would clip both
    adv = torch.tensor([[1.0, -2.0]])
    out = pg_policy_loss(log_probs, old, adv, torch.ones(1, 2))
    assert out.loss.item() == pytest.approx((-math.log(0.5) + 2 * math.log(0.25)) / 2)
    (grad,) = torch.autograd.grad(out.loss, log_probs)
    assert grad.tolist() == [pytest.approx([-0.5, 1.0])]
    assert out.metrics["ratio_mean"] == pytest.approx((1.25 + 0.5) / 2)
    ppo = ppo_policy_loss(log_probs, old, adv, torch.ones(1, 2))
    (ppo_grad,) = torch.autograd.grad(ppo.loss, log_probs)
    assert ppo_grad.tolist() != grad.tolist()  # off π_old the two objectives part
    # on π_old (ratio 1, no clip active) PG has PPO's gradient
    on_policy = log_probs.detach()
    (pg_at_1,) = torch.autograd.grad(pg_policy_loss(log_probs, on_policy, adv, torch.ones(1, 2)).loss, log_probs)
    (ppo_at_1,) = torch.autograd.grad(ppo_policy_loss(log_probs, on_policy, adv, torch.ones(1, 2)).loss, log_probs)
    torch.testing.assert_close(pg_at_1, ppo_at_1)
