"""Reward normalisation of agentic trajectories (knob `reward_normalization`: grouping, method).

A trajectory's score is s_i = Σ_k r_ik + p_i, its turn rewards plus its format penalties (ROLL adds
the penalty before normalising). Scores are normalised inside groups chosen by `grouping`:

    state      trajectories from the same start state (same env group, same episode round)
    inductive  trajectories of the same environment tag
    batch      the whole batch

and `method` maps each group's scores g = {s_j} (mean μ_g, unbiased standard deviation σ_g):

    identity   ŝ_i = s_i
    mean       ŝ_i = s_i − μ_g
    mean_std   ŝ_i = (s_i − μ_g) / (σ_g + ε)   if σ_g > ε,   else 0
    asym_clip  ŝ_i = clip(mean_std(s)_i, −1, 3)

ε = 1e-6. A group of one has nothing to compare with: mean, mean_std and asym_clip give 0 (σ of one
value is undefined; ROLL's torch.std gives NaN there and the σ > ε test then yields 0 too).
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.algorithms.stats import group_mean_std

GROUPINGS: tuple[str, ...] = ("state", "inductive", "batch")
NORM_METHODS: tuple[str, ...] = ("asym_clip", "identity", "mean_std", "mean")
ASYM_CLIP = (-1.0, 3.0)


def normalization_groups(grouping: str, *, state_ids: Tensor, tag_ids: Tensor) -> Tensor:
    """The group id of each trajectory [batch] for `grouping` (module docstring)."""
    if grouping == "state":
        return state_ids
    if grouping == "inductive":
        return tag_ids
    if grouping == "batch":
        return torch.zeros_like(state_ids)
    raise ValueError(f"reward_normalization.grouping {grouping!r} is not known; "
                     f"valid: {', '.join(GROUPINGS)}")


def normalize_scores(scores: Tensor, group_ids: Tensor, method: str, eps: float = 1e-6) -> Tensor:
    """ŝ [batch] from s [batch] by `method` inside the groups of `group_ids` (module docstring)."""
    if method not in NORM_METHODS:
        raise ValueError(f"reward_normalization.method {method!r} is not known; "
                         f"valid: {', '.join(NORM_METHODS)}")
    if method == "identity":
        return scores.clone()
    mean, std, _ = group_mean_std(scores, group_ids)  # σ = 0 for a group of one
    if method == "mean":
        return scores - mean
    standardised = torch.where(std > eps, (scores - mean) / (std + eps), torch.zeros_like(scores))
    return standardised.clamp(*ASYM_CLIP) if method == "asym_clip" else standardised
