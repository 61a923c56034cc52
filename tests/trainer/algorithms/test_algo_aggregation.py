"""Loss aggregation: hand values per mode, masking, and data-parallel sharding with global counts."""

from __future__ import annotations

import pytest
import torch
from algo_testing import FAST, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from trainer.algorithms.aggregation import LOSS_AGG_MODES, LossAgg, agg_loss
from trainer.algorithms.policy_loss import ppo_policy_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0], [100.0, 100.0, 100.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # 4 real tokens, 2 real sequences


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("token-sum", 10.0),
        ("seq-mean-token-sum", (6 + 4) / 2),
        ("seq-mean-token-mean", (2 + 4) / 2),
        ("seq-mean-token-sum-norm", (6 + 4) / (2 * 3)),
    ],
)
def test_each_mode_by_hand(mode: str, expected: float) -> None:
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_divides_by_a_constant_length_and_weights_apply() -> None:
    assert agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(10 / 20)
    weights = torch.tensor([2.0, 0.5, 1.0], dtype=torch.float64)
    assert agg_loss(LOSS, MASK, "token-mean", weights=weights).item() == pytest.approx((12 + 2) / 4)
    assert agg_loss(LOSS, MASK, "seq-mean-token-mean", weights=weights).item() == pytest.approx((4 + 2) / 2)


def test_empty_mask_gives_zero_not_nan() -> None:
    for mode in LOSS_AGG_MODES:
        assert agg_loss(LOSS, torch.zeros_like(MASK), mode).item() == 0.0


def test_unknown_mode_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: token-mean, token-sum, seq-mean-token-sum"):
        LossAgg("mean")
    with pytest.raises(ValueError, match="norm_length"):
        agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=0)
    with pytest.raises(ValueError, match="shape mismatch"):
        agg_loss(LOSS, MASK[:, :2], "token-mean")


def shards_of(batch: int, num_shards: int, g: torch.Generator) -> list[Tensor]:
    """A random partition of the rows into `num_shards` parts (some may be empty)."""
    owner = torch.randint(0, num_shards, (batch,), generator=g)
    return [torch.nonzero(owner == k).flatten() for k in range(num_shards)]


def global_agg(mode: str, mask: Tensor) -> LossAgg:
    return LossAgg(
        mode,
        global_num_tokens=float((mask != 0).sum()),
        global_num_seqs=float((mask != 0).any(-1).sum()),
        norm_length=mask.shape[-1],
    )


@FAST
@given(
    seed=seeds,
    batch=st.integers(1, 8),
    length=lengths,
    num_shards=st.sampled_from([2, 3]),
    mode=st.sampled_from(list(LOSS_AGG_MODES)),
)
def test_sharded_sum_with_global_counts_equals_single_process(
    seed: int, batch: int, length: int, num_shards: int, mode: str
) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    loss_mat = torch.randn(batch, length, generator=g, dtype=torch.float64)
    weights = torch.rand(batch, generator=g, dtype=torch.float64)
    agg = global_agg(mode, mask)
    single = agg(loss_mat, mask, weights)
    sharded = sum(agg(loss_mat[rows], mask[rows], weights[rows]) for rows in shards_of(batch, num_shards, g))
    torch.testing.assert_close(sharded, single, rtol=1e-10, atol=1e-12)
    noisy = agg(perturb_masked(loss_mat, mask, g), mask, weights)
    assert torch.equal(noisy, single)


@FAST
@given(seed=seeds, batch=st.integers(1, 8), length=lengths, num_shards=st.sampled_from([2, 3]))
def test_sharded_ppo_loss_and_gradient_equal_single_process(
    seed: int, batch: int, length: int, num_shards: int
) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    log_probs = (-torch.rand(batch, length, generator=g, dtype=torch.float64)).requires_grad_()
    old = log_probs.detach() + 0.3 * torch.randn(batch, length, generator=g, dtype=torch.float64)
    advantages = torch.randn(batch, length, generator=g, dtype=torch.float64)
    agg = global_agg("token-mean", mask)
    single = ppo_policy_loss(log_probs, old, advantages, mask, agg=agg).loss
    (single_grad,) = torch.autograd.grad(single, log_probs)
    sharded = sum(
        ppo_policy_loss(log_probs[rows], old[rows], advantages[rows], mask[rows], agg=agg).loss
        for rows in shards_of(batch, num_shards, g)
    )
    (sharded_grad,) = torch.autograd.grad(sharded, log_probs)
    torch.testing.assert_close(sharded, single, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(sharded_grad, single_grad, rtol=1e-10, atol=1e-12)
