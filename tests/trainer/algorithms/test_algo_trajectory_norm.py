"""Agentic reward normalisation (`reward_normalization`): every grouping and method against values
worked out by hand (docs/algorithms.md, "Agentic trajectory scores")."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms.step_advantages import gigpo, step_reinforce
from trainer.algorithms.trajectory_norm import (
    GROUPINGS,
    NORM_METHODS,
    norm_pair,
    normalization_groups,
    normalize_pair,
    normalize_scores,
)

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


# ROLL main's pair (agentic_reward_norm): the mean and the std chosen apart. SCORES' batch: mean 4/3, deviations
# -1/3, 5/3, -4/3, -4/3, 11/3, -7/3, squares summing to 228/9, unbiased variance 228/45 = 76/15.
SIGMA_B = math.sqrt(76 / 15)


def test_group_mean_with_batch_std() -> None:
    # group means 2, 0, 2 -> centred -1, 1, 0, 0, 3, -3; every group has two members, σ_B > ε
    _close(normalize_pair(SCORES, STATES, "group", "batch"), [x / SIGMA_B for x in (-1, 1, 0, 0, 3, -3)])
    _close(
        normalize_scores(SCORES, STATES, "identity", "group", "batch"),
        [x / SIGMA_B for x in (-1, 1, 0, 0, 3, -3)],
    )


def test_batch_mean_with_group_std() -> None:
    # centred by 4/3; group stds √2, 0 (-> 0), 3√2
    r2 = math.sqrt(2)
    want = [(-1 / 3) / r2, (5 / 3) / r2, 0, 0, (11 / 3) / (3 * r2), (-7 / 3) / (3 * r2)]
    _close(normalize_pair(SCORES, STATES, "batch", "group"), want)


def test_batch_mean_alone_and_batch_pair() -> None:
    centred = [x - 4 / 3 for x in SCORES.tolist()]
    _close(normalize_pair(SCORES, STATES, "batch", None), centred)
    _close(normalize_pair(SCORES, STATES, "batch", "batch"), [x / SIGMA_B for x in centred])
    _close(
        normalize_pair(SCORES, STATES, None, "group"),  # no mean: s / σ_g; the constant {0, 0} group -> 0
        [1 / math.sqrt(2), 3 / math.sqrt(2), 0, 0, 5 / (3 * math.sqrt(2)), -1 / (3 * math.sqrt(2))],
    )


def test_a_group_of_one_gives_zero_even_with_the_batch_std() -> None:
    # ROLL tests the score's own group size: [1, 3 | 7], σ_B of {1, 3, 7} = √(28/3) > 0, yet 7 alone -> 0
    scores, groups = torch.tensor([1.0, 3.0, 7.0]), torch.tensor([0, 0, 1])
    _close(
        normalize_pair(scores, groups, "group", "batch"), [-1 / math.sqrt(28 / 3), 1 / math.sqrt(28 / 3), 0]
    )
    _close(normalize_pair(scores, groups, "group", None), [-1, 1, 0])  # no std: just the group mean


def test_method_names_a_pair_and_explicit_types_win() -> None:
    assert [norm_pair(m) for m in ("identity", "mean", "mean_std", "asym_clip")] == [
        (None, None),
        ("group", None),
        ("group", "group"),
        ("group", "group"),
    ]
    assert norm_pair("mean_std", "batch") == ("batch", "group")  # ROLL: method fills only the unset types
    assert norm_pair("mean", std_type="batch") == ("group", "batch")
    assert norm_pair("identity", None, "group") == (None, "group")
    for method in NORM_METHODS:  # the old method alone means what it did
        mean_type, std_type = norm_pair(method)
        plain = normalize_pair(SCORES, STATES, mean_type, std_type) if mean_type or std_type else SCORES
        want = plain.clamp(-1, 3) if method == "asym_clip" else plain
        _close(normalize_scores(SCORES, STATES, method), want.tolist())
    # asym_clip keeps its clip with an explicit type: batch mean + group std, clipped to [-1, 3]
    high = torch.tensor([0.0] * 11 + [12.0])
    _close(normalize_scores(high, torch.zeros(12, dtype=torch.long), "asym_clip", "batch")[[11]], [3.0])


def test_unknown_types_name_the_field_and_the_valid_values() -> None:
    with pytest.raises(
        ValueError,
        match=r"reward_normalization.norm_mean_type 'traj' is not known; valid: batch, "
        r"group, or unset",
    ):
        norm_pair("mean", "traj")
    with pytest.raises(ValueError, match=r"reward_normalization.norm_std_type 'running' is not known"):
        normalize_pair(SCORES, STATES, "group", "running")


def test_step_reinforce_and_gigpo_take_the_pair() -> None:
    # turns: A (state 0) returns [1, 2], B (state 0) [3], C (state 1) [5]. group mean over state 0's turns {1, 2, 3}
    # = 2; σ_B over all four turns {1, 2, 3, 5}: mean 2.75, squares 3.0625 + 0.5625 + 0.0625 + 5.0625 = 8.75,
    # variance 8.75/3; C is alone in its group -> 0
    returns = torch.tensor([[1.0, 2.0], [3.0, 0.0], [5.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]]).bool()
    groups = torch.tensor([0, 0, 1])
    sigma = math.sqrt(8.75 / 3)
    got = step_reinforce(returns, mask, groups, "identity", "group", "batch")
    _close(got.flatten(), [-1 / sigma, 0, 1 / sigma, 0, 0, 0])
    # gigpo: the episode term takes the pair, the anchor term the method alone (ROLL's state_group_id norm)
    scores = torch.tensor([3.0, 3.0, 5.0])
    anchors = torch.tensor([[0, 1], [0, -1], [2, -1]])
    out = gigpo(scores, returns, mask, groups, anchors, "mean", mean_type="batch")
    # episode: per-turn scores {3, 3, 3, 5}, batch mean 3.5 -> -0.5, -0.5, -0.5, 1.5
    _close(out.episode.flatten(), [-0.5, -0.5, -0.5, 0, 1.5, 0])
    # anchor term with "mean" over the anchor groups: {A0: 1, B0: 3} mean 2 -> -1, 1; A1 alone, C alone -> 0
    _close(out.step.flatten(), [-1, 0, 1, 0, 0, 0])
