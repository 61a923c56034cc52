"""Agentic reward normalisation (`reward_normalization`): every grouping and method against values
worked out by hand (docs/algorithms.md, "Agentic trajectory scores")."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms.trajectory_norm import GROUPINGS, NORM_METHODS, normalization_groups, normalize_scores

# six trajectories: three start states of two, the first three from tag 0, the last three from tag 1
SCORES = torch.tensor([1.0, 3.0, 0.0, 0.0, 5.0, -1.0])
STATES = torch.tensor([0, 0, 1, 1, 2, 2])
TAGS = torch.tensor([0, 0, 0, 1, 1, 1])
R2 = 1 / math.sqrt(2)  # (x - mean) / std for a pair: ±1/√2 whatever the pair (unbiased std = |a - b| / √2)


def _close(got: torch.Tensor, want: list[float]) -> None:
    assert got.tolist() == pytest.approx(want, abs=1e-5)


def test_groupings() -> None:
    assert GROUPINGS == ("state", "inductive", "batch") and NORM_METHODS == (
        "asym_clip",
        "identity",
        "mean_std",
        "mean",
    )
    assert normalization_groups("state", state_ids=STATES, tag_ids=TAGS).tolist() == [0, 0, 1, 1, 2, 2]
    assert normalization_groups("inductive", state_ids=STATES, tag_ids=TAGS).tolist() == [0, 0, 0, 1, 1, 1]
    assert normalization_groups("batch", state_ids=STATES, tag_ids=TAGS).tolist() == [0] * 6
    with pytest.raises(
        ValueError, match=r"reward_normalization.grouping 'traj' is not known; valid: state, "
    ):
        normalization_groups("traj", state_ids=STATES, tag_ids=TAGS)


def test_identity_keeps_the_scores() -> None:
    _close(normalize_scores(SCORES, STATES, "identity"), [1, 3, 0, 0, 5, -1])


def test_mean_by_state() -> None:
    # means 2, 0, 2
    _close(normalize_scores(SCORES, STATES, "mean"), [-1, 1, 0, 0, 3, -3])


def test_mean_std_by_state() -> None:
    # {1, 3}: mean 2, std √2; {0, 0}: std 0 -> 0; {5, -1}: mean 2, std √18 = 3√2 -> ±3/(3√2)
    _close(normalize_scores(SCORES, STATES, "mean_std"), [-R2, R2, 0, 0, R2, -R2])


def test_mean_std_by_tag() -> None:
    # tag 0: {1, 3, 0}: mean 4/3, std √(((1/3)² + (5/3)² + (4/3)²) / 2) = √(7/3)
    # tag 1: {0, 5, -1}: mean 4/3, std √(((4/3)² + (11/3)² + (7/3)²) / 2) = √(31/3)
    s0, s1 = math.sqrt(7 / 3), math.sqrt(31 / 3)
    want = [
        (1 - 4 / 3) / s0,
        (3 - 4 / 3) / s0,
        (0 - 4 / 3) / s0,
        (0 - 4 / 3) / s1,
        (5 - 4 / 3) / s1,
        (-1 - 4 / 3) / s1,
    ]
    _close(
        normalize_scores(
            SCORES, normalization_groups("inductive", state_ids=STATES, tag_ids=TAGS), "mean_std"
        ),
        want,
    )


def test_mean_over_the_batch() -> None:
    # batch mean 8/6 = 4/3
    _close(
        normalize_scores(SCORES, torch.zeros(6, dtype=torch.long), "mean"),
        [x - 4 / 3 for x in SCORES.tolist()],
    )


def test_asym_clip_clips_at_minus_one_and_three() -> None:
    # eleven 0s and one 12: mean 1, unbiased var (11·1 + 11²) / 11 = 12 -> z(12) = 11/√12 ≈ 3.175 -> 3,
    # z(0) = −1/√12 ≈ −0.289 (kept). Mirrored (eleven 12s, one 0): z(0) ≈ −3.175 -> −1, z(12) ≈ 0.289.
    high = torch.tensor([0.0] * 11 + [12.0])
    low = torch.tensor([12.0] * 11 + [0.0])
    scores = torch.cat([high, low])
    groups = torch.tensor([0] * 12 + [1] * 12)
    z = 1 / math.sqrt(12)
    _close(normalize_scores(scores, groups, "asym_clip"), [-z] * 11 + [3.0] + [z] * 11 + [-1.0])
    _close(normalize_scores(scores, groups, "mean_std")[[11, 23]], [11 * z, -11 * z])  # unclipped


def test_groups_of_one_and_constant_groups_give_zero() -> None:
    scores, groups = torch.tensor([4.0, 2.0, 2.0, -7.0]), torch.tensor([0, 1, 1, 2])
    for method in ("mean", "mean_std", "asym_clip"):
        _close(normalize_scores(scores, groups, method), [0, 0, 0, 0])
    with pytest.raises(
        ValueError, match=r"reward_normalization.method 'zscore' is not known; valid: asym_clip, "
    ):
        normalize_scores(scores, groups, "zscore")
