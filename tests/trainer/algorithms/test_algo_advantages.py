"""Advantage estimators: hand-computed values, float64 loop references, masking/group properties."""

from __future__ import annotations

import math

import pytest
import torch
from algo_testing import (
    FAST,
    batch_sizes,
    generator,
    lengths,
    perturb_masked,
    ragged_mask,
    random_group_ids,
    seeds,
)
from hypothesis import given
from torch import Tensor

from trainer.algorithms.advantages import (
    ADV_ESTIMATORS,
    compute_advantages,
    discounted_returns,
    gae,
    grpo,
    reinforce,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    remax,
    rloo,
)


def outcome(scores: list[float], length: int = 3) -> tuple[Tensor, Tensor]:
    """Token rewards with each score on the last token of a full-length response, and the mask."""
    rewards = torch.zeros(len(scores), length, dtype=torch.float64)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float64)
    return rewards, torch.ones(len(scores), length, dtype=torch.bool)


# ---------------------------------------------------------------- float64 loop references


def gae_reference(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lambd: float) -> Tensor:
    """Plain per-row GAE over the real positions only (masked positions are skipped)."""
    advantages = torch.zeros_like(rewards, dtype=torch.float64)
    for i in range(rewards.shape[0]):
        real = [t for t in range(rewards.shape[1]) if mask[i, t]]
        next_value, next_advantage = 0.0, 0.0
        for t in reversed(real):
            delta = float(rewards[i, t]) + gamma * next_value - float(values[i, t])
            next_advantage = delta + gamma * lambd * next_advantage
            next_value = float(values[i, t])
            advantages[i, t] = next_advantage
    return advantages


def returns_reference(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    returns = torch.zeros_like(rewards, dtype=torch.float64)
    for i in range(rewards.shape[0]):
        running = 0.0
        for t in reversed(range(rewards.shape[1])):
            if mask[i, t]:
                running = float(rewards[i, t]) + gamma * running
                returns[i, t] = running
    return returns


def reinforce_pp_reference(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    returns = returns_reference(rewards, mask, gamma)
    real = [float(returns[i, t]) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]
    if not real:
        return torch.zeros_like(returns)
    mean = sum(real) / len(real)
    var = sum((x - mean) ** 2 for x in real) / max(len(real) - 1, 1)
    out = torch.zeros_like(returns)
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[i, t]:
                out[i, t] = (float(returns[i, t]) - mean) / math.sqrt(var + 1e-8)
    return out


# ---------------------------------------------------------------- hand-computed values


def test_gae_three_tokens_by_hand() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.6, 0.7]], dtype=torch.float64)
    gamma, lambd = 0.9, 0.8
    # δ2 = 1 − 0.7 = 0.3;  δ1 = 0.9·0.7 − 0.6 = 0.03;  δ0 = 0.9·0.6 − 0.5 = 0.04
    # A2 = 0.3;  A1 = 0.03 + 0.72·0.3 = 0.246;  A0 = 0.04 + 0.72·0.246 = 0.21712
    out = gae(rewards, values, torch.ones_like(rewards), gamma, lambd)
    torch.testing.assert_close(out.advantages, torch.tensor([[0.21712, 0.246, 0.3]], dtype=torch.float64))
    torch.testing.assert_close(out.returns, torch.tensor([[0.71712, 0.846, 1.0]], dtype=torch.float64))


def test_gae_skips_a_hole_in_the_mask() -> None:
    rewards = torch.tensor([[0.0, 5.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 9.0, 0.7]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    out = gae(rewards, values, mask, gamma=0.9, lambd=0.8)
    # token 1 does not exist: δ0 = 0.9·0.7 − 0.5 = 0.13, A0 = 0.13 + 0.72·0.3
    torch.testing.assert_close(
        out.advantages, torch.tensor([[0.13 + 0.72 * 0.3, 0.0, 0.3]], dtype=torch.float64)
    )


def test_grpo_one_group_by_hand() -> None:
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0])
    out = grpo(rewards, mask, torch.zeros(4, dtype=torch.long), epsilon=0.0)
    std = math.sqrt((4 * 0.25) / 3)  # unbiased std of [1, 0, 0, 1]
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64) / std
    torch.testing.assert_close(out.advantages, expected.unsqueeze(-1).expand(4, 3))
    torch.testing.assert_close(out.returns, out.advantages)


def test_dr_grpo_only_centres() -> None:
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0])
    out = grpo(rewards, mask, torch.zeros(4, dtype=torch.long), norm_adv_by_std=False)
    assert out.advantages[:, 0].tolist() == [0.5, -0.5, -0.5, 0.5]


def test_grpo_non_contiguous_groups() -> None:
    rewards, mask = outcome([1.0, 2.0, 0.0, 4.0])
    out = grpo(rewards, mask, torch.tensor([5, 9, 5, 9]), norm_adv_by_std=False)
    assert out.advantages[:, 0].tolist() == [0.5, -1.0, -0.5, 1.0]


def test_grpo_edge_cases_are_zero_and_finite() -> None:
    # group 0: zero variance; group 1: a single sample; group 2: one sample with an empty mask
    rewards, mask = outcome([1.0, 1.0, 3.0, 0.0, 2.0])
    mask[3] = False
    out = grpo(rewards, mask, torch.tensor([0, 0, 1, 2, 2]))
    assert torch.isfinite(out.advantages).all()
    assert out.advantages[:4].abs().sum() == 0  # zero-variance, size one, empty mask
    assert out.advantages[4].abs().sum() == 0  # its group's only valid member is itself


def test_rloo_by_hand() -> None:
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0, 7.0])
    out = rloo(rewards, mask, torch.tensor([0, 0, 0, 0, 1]))
    # 1 − mean(0, 0, 1) = 2/3 ; 0 − mean(1, 0, 1) = −2/3 ; a group of one → 0
    expected = torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0], dtype=torch.float64)
    torch.testing.assert_close(out.advantages[:, 0], expected)


def test_reinforce_discounted_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 4.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = reinforce(rewards, mask, gamma=0.5)
    # row 0: G2 = 2, G1 = 1, G0 = 1.5;  row 1: G1 = 4, G0 = 2, padding 0
    expected = torch.tensor([[1.5, 1.0, 2.0], [2.0, 4.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(out.advantages, expected)
    baselined = reinforce(rewards, mask, gamma=0.5, batch_baseline=True)
    torch.testing.assert_close(baselined.advantages, (expected - 1.75) * mask)  # b = mean(1.5, 2)
    torch.testing.assert_close(baselined.returns, expected)


def test_reinforce_plus_plus_by_hand() -> None:
    rewards, mask = outcome([1.0, 0.0], length=2)
    out = reinforce_plus_plus(rewards, mask, gamma=1.0)
    # returns [[1, 1], [0, 0]]: mean 0.5, unbiased var 1/3
    expected = torch.tensor([[0.5, 0.5], [-0.5, -0.5]], dtype=torch.float64) / math.sqrt(1 / 3 + 1e-8)
    torch.testing.assert_close(out.advantages, expected)


def test_reinforce_plus_plus_baseline_by_hand() -> None:
    rewards, mask = outcome([1.0, 0.0, 3.0, 3.0], length=1)
    out = reinforce_plus_plus_baseline(rewards, mask, torch.tensor([0, 0, 1, 1]))
    # centred: [0.5, -0.5, 0, 0]; mean 0, unbiased var 1/6
    expected = torch.tensor([[0.5], [-0.5], [0.0], [0.0]], dtype=torch.float64) / math.sqrt(1 / 6 + 1e-8)
    torch.testing.assert_close(out.advantages, expected)


def test_remax_subtracts_the_greedy_reward() -> None:
    rewards, mask = outcome([1.0, 0.0])
    mask[1, 2] = False
    rewards[1, 1] = 0.25  # row 1's reward on its last real token
    out = remax(rewards, mask, torch.tensor([0.5, 1.0], dtype=torch.float64))
    expected = torch.tensor([[0.5, 0.5, 0.5], [-0.75, -0.75, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(out.advantages, expected)


def test_empty_masks_give_zeros_everywhere() -> None:
    rewards = torch.randn(3, 4, dtype=torch.float64)
    mask = torch.zeros(3, 4)
    ids = torch.tensor([0, 0, 1])
    for out in (
        gae(rewards, rewards, mask),
        reinforce(rewards, mask, batch_baseline=True),
        reinforce_plus_plus(rewards, mask),
        reinforce_plus_plus_baseline(rewards, mask, ids),
        grpo(rewards, mask, ids),
        rloo(rewards, mask, ids),
        remax(rewards, mask, torch.ones(3, dtype=torch.float64)),
    ):
        assert torch.equal(out.advantages, torch.zeros_like(rewards))
        assert torch.equal(out.returns, torch.zeros_like(rewards))


def test_compute_advantages_names_the_missing_input() -> None:
    rewards, mask = outcome([1.0, 0.0])
    with pytest.raises(ValueError, match="`values`"):
        compute_advantages("gae", rewards, mask)
    with pytest.raises(ValueError, match="`group_ids`"):
        compute_advantages("grpo", rewards, mask)
    with pytest.raises(ValueError, match="valid: gae, reinforce"):
        compute_advantages("ppo", rewards, mask)
    with pytest.raises(ValueError, match="gamma must lie in"):
        compute_advantages("reinforce", rewards, mask, gamma=1.5)
    with pytest.raises(ValueError, match="group_ids must have shape"):
        grpo(rewards, mask, torch.zeros(3, dtype=torch.long))


def test_compute_advantages_dispatches_every_estimator() -> None:
    g = generator(0)
    mask = ragged_mask(g, 6, 5)
    rewards = torch.randn(6, 5, generator=g, dtype=torch.float64)
    inputs = {
        "group_ids": random_group_ids(g, 6),
        "values": torch.randn(6, 5, generator=g, dtype=torch.float64),
        "baseline_rewards": torch.randn(6, generator=g, dtype=torch.float64),
    }
    direct = {
        "gae": gae(rewards, inputs["values"], mask, 0.9, 0.8),
        "reinforce": reinforce(rewards, mask, 0.9),
        "reinforce_plus_plus": reinforce_plus_plus(rewards, mask, 0.9),
        "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline(rewards, mask, inputs["group_ids"]),
        "grpo": grpo(rewards, mask, inputs["group_ids"]),
        "rloo": rloo(rewards, mask, inputs["group_ids"]),
        "remax": remax(rewards, mask, inputs["baseline_rewards"]),
    }
    assert set(direct) == set(ADV_ESTIMATORS)
    for name, expected in direct.items():
        got = compute_advantages(name, rewards, mask, gamma=0.9, lambd=0.8, **inputs)
        assert torch.equal(got.advantages, expected.advantages), name


# ---------------------------------------------------------------- loop references on random input


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_gae_matches_the_loop_reference(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64)
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    gamma, lambd = float(torch.rand(1, generator=g)), float(torch.rand(1, generator=g))
    out = gae(rewards, values, mask, gamma, lambd)
    expected = gae_reference(rewards, values, mask, gamma, lambd)
    torch.testing.assert_close(out.advantages, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.returns, torch.where(mask, expected + values, 0.0), rtol=1e-12, atol=1e-12)


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_reinforce_plus_plus_matches_the_loop_reference(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64)
    gamma = float(torch.rand(1, generator=g))
    out = reinforce_plus_plus(rewards, mask, gamma)
    torch.testing.assert_close(out.returns, returns_reference(rewards, mask, gamma), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        out.advantages, reinforce_pp_reference(rewards, mask, gamma), rtol=1e-9, atol=1e-9
    )


# ---------------------------------------------------------------- properties


def all_estimators(rewards: Tensor, mask: Tensor, values: Tensor, ids: Tensor, baseline: Tensor) -> dict:
    return {
        "gae": gae(rewards, values, mask, 0.9, 0.7),
        "reinforce": reinforce(rewards, mask, 0.8, batch_baseline=True),
        "reinforce_plus_plus": reinforce_plus_plus(rewards, mask, 0.9),
        "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline(rewards, mask, ids),
        "grpo": grpo(rewards, mask, ids),
        "dr_grpo": grpo(rewards, mask, ids, norm_adv_by_std=False),
        "rloo": rloo(rewards, mask, ids),
        "remax": remax(rewards, mask, baseline),
        "returns": (discounted_returns(rewards, mask, 0.5),) * 2,
    }


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_masked_positions_never_change_a_result(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64)
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    ids = random_group_ids(g, batch)
    baseline = torch.randn(batch, generator=g, dtype=torch.float64)
    clean = all_estimators(rewards, mask, values, ids, baseline)
    noisy = all_estimators(
        perturb_masked(rewards, mask, g), mask, perturb_masked(values, mask, g), ids, baseline
    )
    for name in clean:
        for got, expected in zip(noisy[name], clean[name], strict=True):
            assert torch.equal(got, expected), name
            assert torch.isfinite(got).all(), name
            assert torch.equal(got[~mask], torch.zeros_like(got[~mask])), name


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_permuting_samples_and_relabelling_groups_permutes_outputs(
    seed: int, batch: int, length: int
) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    rewards = torch.randn(batch, length, generator=g, dtype=torch.float64)
    values = torch.randn(batch, length, generator=g, dtype=torch.float64)
    ids = random_group_ids(g, batch)
    baseline = torch.randn(batch, generator=g, dtype=torch.float64)
    perm = torch.randperm(batch, generator=g)
    relabel = torch.randperm(int(ids.max()) + 1, generator=g) + 100  # a bijection on the ids
    before = all_estimators(rewards, mask, values, ids, baseline)
    after = all_estimators(rewards[perm], mask[perm], values[perm], relabel[ids][perm], baseline[perm])
    for name in before:
        for got, expected in zip(after[name], before[name], strict=True):
            torch.testing.assert_close(got, expected[perm], rtol=1e-10, atol=1e-10, msg=name)


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_outcome_estimators_stay_finite_on_degenerate_groups(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length, holes=False)
    scores = torch.randint(0, 2, (batch,), generator=g).double()  # ties everywhere: zero-variance groups
    rewards = torch.zeros(batch, length, dtype=torch.float64)
    rewards[:, -1] = scores
    ids = random_group_ids(g, batch)
    outs = all_estimators(
        rewards, mask, torch.zeros_like(rewards), ids, torch.zeros(batch, dtype=torch.float64)
    )
    for name, (advantages, returns) in outs.items():
        assert torch.isfinite(advantages).all() and torch.isfinite(returns).all(), name
