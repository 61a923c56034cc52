"""Reward normalisation of agentic trajectories (knob `reward_normalization`: grouping, norm_mean_type,
norm_std_type, and the older method).

A trajectory's score is s_i = Σ_k r_ik + p_i, its turn rewards plus its format penalties (ROLL adds
the penalty before normalising). Scores are normalised inside groups chosen by `grouping`:

    state      trajectories from the same start state (same env group, same episode round)
    inductive  trajectories of the same environment tag
    batch      the whole batch

ROLL main (roll/pipeline/agentic/utils.py `agentic_reward_norm`) chooses the mean subtracted and the std
divided by apart, each over the score's group g or over the whole batch B (mean μ, unbiased std σ):

    norm_mean_type   group: μ = μ_g     batch: μ = μ_B     unset: μ = 0
    norm_std_type    group: σ = σ_g     batch: σ = σ_B     unset: no division

    ŝ_i = s_i − μ                                  without a std type
    ŝ_i = (s_i − μ) / (σ + ε)   if n_g > 1 and σ > ε,   else 0

with n_g the size of the score's own group (ROLL tests the group's size even for the batch std), ε = 1e-6.

The older single `method` names a pair (ROLL's `_resolve_reward_norm_defaults`; with grouping batch the
group is the batch, so "group" covers ROLL's batch mapping there):

    identity   (unset, unset)     ŝ_i = s_i
    mean       (group, unset)     ŝ_i = s_i − μ_g
    mean_std   (group, group)     ŝ_i = (s_i − μ_g) / (σ_g + ε)   if σ_g > ε,   else 0
    asym_clip  (group, group)     ŝ_i = clip(mean_std(s)_i, −1, 3)

A type set explicitly wins; an unset one is filled from `method` (ROLL's RewardNormalizationConfig
__post_init__). asym_clip keeps its clip to [−1, 3] whatever the pair (ROLL main dropped the clip and
reads asym_clip as mean_std; here the name keeps the meaning it had). A group of one has nothing to compare
with: a group mean gives 0, a std gives 0 (σ of one value is undefined; ROLL's torch.std gives NaN there
and its test then yields 0 too).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algorithms.stats import group_mean_std

GROUPINGS: tuple[str, ...] = ("state", "inductive", "batch")
NORM_METHODS: tuple[str, ...] = ("asym_clip", "identity", "mean_std", "mean")
NORM_TYPES: tuple[str, ...] = ("batch", "group")  # norm_mean_type / norm_std_type; None: unset
ASYM_CLIP = (-1.0, 3.0)
METHOD_PAIRS: dict[str, tuple[str | None, str | None]] = {
    "identity": (None, None),
    "mean": ("group", None),
    "mean_std": ("group", "group"),
    "asym_clip": ("group", "group"),
}


def normalization_groups(grouping: str, *, state_ids: Tensor, tag_ids: Tensor) -> Tensor:
    """The group id of each trajectory [batch] for `grouping` (module docstring)."""
    if grouping == "state":
        return state_ids
    if grouping == "inductive":
        return tag_ids
    if grouping == "batch":
        return torch.zeros_like(state_ids)
    raise ValueError(
        f"reward_normalization.grouping {grouping!r} is not known; valid: {', '.join(GROUPINGS)}"
    )


def _check(field: str, value: str | None, valid: tuple[str, ...]) -> None:
    if value is not None and value not in valid:
        raise ValueError(
            f"reward_normalization.{field} {value!r} is not known; valid: {', '.join(valid)}"
            + (", or unset" if field != "method" else "")
        )


def norm_pair(
    method: str = "identity", mean_type: str | None = None, std_type: str | None = None
) -> tuple[str | None, str | None]:
    """(mean type, std type): each explicit type, else the one `method` names (METHOD_PAIRS, module docstring)."""
    _check("method", method, NORM_METHODS)
    _check("norm_mean_type", mean_type, NORM_TYPES)
    _check("norm_std_type", std_type, NORM_TYPES)
    from_method = METHOD_PAIRS[method]
    return (
        mean_type if mean_type is not None else from_method[0],
        std_type if std_type is not None else from_method[1],
    )


def pair_mean(scores: Tensor, group_mean: Tensor, mean_type: str | None) -> Tensor:
    """μ per score [batch]: the group's μ_g (group), the batch's μ_B (batch), 0 (unset)."""
    if mean_type == "group":
        return group_mean
    if mean_type == "batch":
        return scores.mean().expand_as(scores)
    return torch.zeros_like(scores)


def pair_std(scores: Tensor, group_std: Tensor, std_type: str | None) -> Tensor | None:
    """σ per score [batch]: the group's unbiased σ_g (group), the batch's unbiased σ_B (batch), None (unset)."""
    if std_type == "group":
        return group_std
    if std_type == "batch":
        batch_std = scores.std() if scores.numel() > 1 else torch.zeros((), dtype=scores.dtype)
        return batch_std.expand_as(scores)
    return None


def normalize_pair(
    scores: Tensor, group_ids: Tensor, mean_type: str | None, std_type: str | None, eps: float = 1e-6
) -> Tensor:
    """ŝ [batch] = (s − μ) / (σ + ε) where n_g > 1 and σ > ε, else 0; s − μ without a std type (module
    docstring: μ, σ by norm_mean_type / norm_std_type, n_g the size of each score's group)."""
    _check("norm_mean_type", mean_type, NORM_TYPES)
    _check("norm_std_type", std_type, NORM_TYPES)
    group_mean, group_std, group_size = group_mean_std(scores, group_ids)  # σ_g = 0 for a group of one
    centred = scores - pair_mean(scores, group_mean, mean_type)
    std = pair_std(scores, group_std, std_type)
    if std is None:
        return centred
    usable = (group_size > 1) & (std > eps)
    return torch.where(usable, centred / (std + eps), torch.zeros_like(scores))


def normalize_scores(
    scores: Tensor,
    group_ids: Tensor,
    method: str = "identity",
    mean_type: str | None = None,
    std_type: str | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """ŝ [batch] from s [batch] inside the groups of `group_ids`: the pair norm_pair(method, mean_type, std_type)
    (normalize_pair), clipped to [−1, 3] for method asym_clip (module docstring)."""
    pair = norm_pair(method, mean_type, std_type)
    out = scores.clone() if pair == (None, None) else normalize_pair(scores, group_ids, *pair, eps=eps)
    return out.clamp(*ASYM_CLIP) if method == "asym_clip" else out
