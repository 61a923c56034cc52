"""Reward and advantage processing: clipping, normalisation (incl. running moments), shaping,
difficulty masking and loss weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from algo_testing import FAST, batch_sizes, generator, lengths, perturb_masked, ragged_mask, seeds
from hypothesis import given
from hypothesis import strategies as st

from trainer.algorithms.rewards import (
    RunningMoments,
    add_length_reward,
    apply_format_penalty,
    clip_advantages,
    clip_rewards,
    difficulty_loss_weights,
    difficulty_mask,
    length_loss_weights,
    normalize_rewards,
    resolve_norm_types,
    sample_loss_weights,
    update_running_moments,
    varied_groups_mask,
    whiten,
)

R = torch.tensor([1.0, 3.0, 0.0, 4.0], dtype=torch.float64)
IDS = torch.tensor([7, 2, 7, 2])


def test_reward_and_advantage_clip() -> None:
    clipped, frac = clip_rewards(torch.tensor([-5.0, 0.5, 2.0, 9.0]), 2.0)
    assert clipped.tolist() == [-2.0, 0.5, 2.0, 2.0]
    assert frac == pytest.approx(0.5)
    assert clip_rewards(R, None) == (R, 0.0)
    advantages = torch.tensor([[3.0, -0.5, 99.0]])
    mask = torch.tensor([[1, 1, 0]])
    clipped_adv, adv_frac = clip_advantages(advantages, mask, 1.0)
    assert clipped_adv.tolist() == [[1.0, -0.5, 0.0]]
    assert adv_frac == pytest.approx(0.5)  # the masked 99 does not count
    with pytest.raises(ValueError, match="reward_clip must be > 0"):
        clip_rewards(R, 0.0)


@pytest.mark.parametrize(
    ("mean_type", "std_type", "expected"),
    [
        ("none", "none", [1.0, 3.0, 0.0, 4.0]),
        ("batch", "none", [-1.0, 1.0, -2.0, 2.0]),  # batch mean 2
        ("group", "none", [0.5, -0.5, -0.5, 0.5]),  # group means 0.5 (id 7) and 3.5 (id 2)
        ("none", "batch", [x / math.sqrt(10 / 3) for x in (1.0, 3.0, 0.0, 4.0)]),  # unbiased var 10/3
        (
            "group",
            "group",
            [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.5 / math.sqrt(0.5)],
        ),
    ],
)
def test_normalize_by_hand(mean_type: str, std_type: str, expected: list[float]) -> None:
    out, running = normalize_rewards(
        R, norm_mean_type=mean_type, norm_std_type=std_type, group_ids=IDS, eps=0.0
    )
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))
    assert running is None


def test_zero_variance_and_single_sample_groups_stay_finite() -> None:
    rewards = torch.tensor([1.0, 1.0, 5.0], dtype=torch.float64)
    ids = torch.tensor([0, 0, 1])
    out, _ = normalize_rewards(rewards, norm_mean_type="group", norm_std_type="group", group_ids=ids)
    assert out.tolist() == [0.0, 0.0, 0.0]
    scaled, _ = normalize_rewards(rewards, norm_mean_type="none", norm_std_type="group", group_ids=ids)
    assert scaled.tolist() == [1.0, 1.0, 5.0]  # nothing to scale by: divided by 1, not by ε
    single, _ = normalize_rewards(rewards[:1], norm_mean_type="batch", norm_std_type="batch")
    assert single.tolist() == [0.0]
    with pytest.raises(ValueError, match="needs group_ids"):
        normalize_rewards(rewards, norm_mean_type="group")
    with pytest.raises(ValueError, match="norm_std_type 'std'"):
        normalize_rewards(rewards, norm_std_type="std")


@FAST
@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5), seed=seeds)
def test_running_moments_equal_the_statistics_of_everything_seen(sizes: list[int], seed: int) -> None:
    g = generator(seed)
    batches = [torch.randn(n, generator=g, dtype=torch.float64) * 3 + 1 for n in sizes]
    state = RunningMoments()
    for batch in batches:
        state = update_running_moments(state, batch)
    seen = np.concatenate([b.numpy() for b in batches])
    assert state.count == len(seen)
    if len(seen):
        assert state.mean == pytest.approx(float(seen.mean()), abs=1e-9)
        assert state.var == pytest.approx(float(seen.var()), abs=1e-9)
    if len(seen) > 1:
        assert state.std == pytest.approx(float(seen.std(ddof=1)), abs=1e-9)
    else:
        assert state.std == 1.0


def test_running_normalisation_updates_first_and_returns_the_new_state() -> None:
    first = torch.tensor([1.0, 3.0], dtype=torch.float64)
    out, state = normalize_rewards(first, norm_mean_type="running", norm_std_type="running", eps=0.0)
    assert state == RunningMoments(mean=2.0, var=1.0, count=2)
    torch.testing.assert_close(out, (first - 2.0) / math.sqrt(2.0))
    out2, state2 = normalize_rewards(
        torch.tensor([5.0], dtype=torch.float64),
        norm_mean_type="running",
        norm_std_type="none",
        running=state,
    )
    assert state2.mean == pytest.approx(3.0) and state2.count == 3
    assert out2.item() == pytest.approx(2.0)
    assert state.count == 2  # the old state is a value, untouched


def test_resolve_norm_types_follows_rolls_knobs() -> None:
    assert resolve_norm_types(None, None) == ("none", "none")
    assert resolve_norm_types("group", "group", reward_shift=True) == ("group", "none")
    assert resolve_norm_types("batch", "batch", reward_scale=True) == ("none", "batch")
    assert resolve_norm_types(None, None, use_reward_scaling=True) == ("none", "running")
    assert resolve_norm_types(None, None, use_reward_scaling=True, use_reward_norm=True) == (
        "running",
        "running",
    )
    with pytest.raises(ValueError, match="exclusive"):
        resolve_norm_types("batch", "batch", reward_shift=True, reward_scale=True)
    with pytest.raises(ValueError, match="use_reward_norm applies only"):
        resolve_norm_types(None, None, use_reward_norm=True)
    with pytest.raises(ValueError, match="use_reward_scaling cannot be combined"):
        resolve_norm_types("batch", None, use_reward_scaling=True)
    with pytest.raises(ValueError, match="norm_mean_type 'mean' is not known; valid: batch, group"):
        resolve_norm_types("mean", None)


@FAST
@given(seed=seeds, batch=batch_sizes, length=lengths)
def test_whitening_is_masked_and_standardises(seed: int, batch: int, length: int) -> None:
    g = generator(seed)
    mask = ragged_mask(g, batch, length)
    values = torch.randn(batch, length, generator=g, dtype=torch.float64) * 5 + 2
    out = whiten(values, mask)
    assert torch.equal(out, whiten(perturb_masked(values, mask, g), mask))
    assert torch.equal(out[~mask], torch.zeros_like(out[~mask]))
    real = out[mask]
    if real.numel() > 1 and values[mask].std() > 1e-3:
        assert real.mean().item() == pytest.approx(0.0, abs=1e-9)
        assert real.std().item() == pytest.approx(1.0, rel=1e-6)
    kept = whiten(values, mask, shift_mean=False)[mask]
    if real.numel() > 1:
        assert kept.mean().item() == pytest.approx(values[mask].mean().item(), rel=1e-9, abs=1e-9)


def test_length_reward_and_format_penalty() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0])
    shaped = add_length_reward(rewards, torch.tensor([0, 5, 20]), max_response_length=10, coef=0.5)
    assert shaped.tolist() == [1.5, 1.25, 0.0]
    with pytest.raises(ValueError, match="response_length"):
        add_length_reward(rewards, torch.tensor([1, 2, 3]), max_response_length=0)
    penalised = apply_format_penalty(rewards, torch.tensor([True, False, False]), -1.0)
    assert penalised.tolist() == [1.0, 0.0, -1.0]


def test_difficulty_mask_drops_all_solved_and_all_failed_groups() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # all solved, all failed, mixed, single
    assert difficulty_mask(scores, ids).tolist() == [False, False, False, False, True, True, False]
    strict = difficulty_mask(
        torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.zeros(4), low_threshold=0.1, high_threshold=0.7
    )
    assert strict.tolist() == [False] * 4  # mean 0.75 ≥ 0.7
    graded = torch.tensor([0.3, 0.3, 0.2, 0.9])
    assert varied_groups_mask(graded, torch.tensor([0, 0, 1, 1])).tolist() == [False, False, True, True]


def test_loss_weights_follow_roll() -> None:
    assert difficulty_loss_weights(torch.tensor([0.0, 0.5, 1.0, 2.0])).tolist() == [0.5, 1.25, 2.0, 2.0]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]])
    torch.testing.assert_close(length_loss_weights(mask), torch.tensor([0.5, 1.5, 1.0]))
    weights = sample_loss_weights(
        3, difficulty_weights=torch.tensor([2.0, 1.0, 1.0]), length_weights=length_loss_weights(mask)
    )
    torch.testing.assert_close(weights, torch.tensor([1.0, 1.5, 1.0]) * (3 / 3.5))
    assert weights.mean().item() == pytest.approx(1.0)
    assert sample_loss_weights(2).tolist() == [1.0, 1.0]
    assert length_loss_weights(torch.ones(2, 3)).tolist() == [1.5, 1.5]
