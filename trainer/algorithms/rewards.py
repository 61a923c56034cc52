"""Reward and advantage processing (ROLL's "PPO reward/advantage processing" knobs, seed 002).

Sequence-level rewards are [batch]; `group_ids` [batch] long marks samples of one prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.algorithms.stats import (
    as_bool_mask,
    clip_fraction,
    fill_masked,
    group_mean_std,
    masked_whiten,
    safe_divisor,
)

NORM_TYPES: tuple[str, ...] = ("batch", "group", "running", "none")


def clip_rewards(rewards: Tensor, reward_clip: float | None) -> tuple[Tensor, float]:
    """`reward_clip`: r ← clip(r, −c, c); returns (rewards, fraction clipped). None = no clipping."""
    if reward_clip is None:
        return rewards, 0.0
    if reward_clip <= 0:
        raise ValueError(f"reward_clip must be > 0, got {reward_clip}")
    return rewards.clamp(-reward_clip, reward_clip), clip_fraction(rewards, -reward_clip, reward_clip)


def clip_advantages(
    advantages: Tensor, response_mask: Tensor, advantage_clip: float | None
) -> tuple[Tensor, float]:
    """`advantage_clip`: A ← clip(A, −c, c) at real tokens; returns (advantages, fraction clipped)."""
    if advantage_clip is None:
        return advantages, 0.0
    if advantage_clip <= 0:
        raise ValueError(f"advantage_clip must be > 0, got {advantage_clip}")
    clipped = fill_masked(advantages.clamp(-advantage_clip, advantage_clip), response_mask)
    return clipped, clip_fraction(advantages, -advantage_clip, advantage_clip, response_mask)


def whiten(values: Tensor, response_mask: Tensor, shift_mean: bool = True) -> Tensor:
    """`whiten_rewards` (token-level rewards, before the estimator) and `whiten_advantages` (after):
    masked (x − mean)/sqrt(var + 1e-8) over all real tokens of the batch; see stats.masked_whiten."""
    return masked_whiten(values, response_mask, shift_mean=shift_mean)


@dataclass(frozen=True)
class RunningMoments:
    """Running mean/variance of every reward seen so far (population variance, Chan et al. merge)."""

    mean: float = 0.0
    var: float = 0.0
    count: float = 0.0

    @property
    def std(self) -> float:
        """Unbiased std; 1.0 until two values have been seen (nothing to scale by yet)."""
        if self.count < 2:
            return 1.0
        return math.sqrt(self.var * self.count / (self.count - 1))


def update_running_moments(state: RunningMoments, values: Tensor) -> RunningMoments:
    """Merge a batch into the running moments (pure: returns the new state).

    n = n_a + n_b,  δ = x̄_b − x̄_a,  x̄ = x̄_a + δ·n_b/n,  M2 = M2_a + M2_b + δ²·n_a·n_b/n,  var = M2/n.
    An empty batch returns the state unchanged.
    """
    n_b = values.numel()
    if n_b == 0:
        return state
    values = values.detach().double()
    mean_b = float(values.mean())
    m2_b = float((values - mean_b).square().sum())
    n = state.count + n_b
    delta = mean_b - state.mean
    m2 = state.var * state.count + m2_b + delta * delta * state.count * n_b / n
    return RunningMoments(mean=state.mean + delta * n_b / n, var=m2 / n, count=n)


def resolve_norm_types(
    norm_mean_type: str | None,
    norm_std_type: str | None,
    *,
    reward_shift: bool = False,
    reward_scale: bool = False,
    use_reward_scaling: bool = False,
    use_reward_norm: bool = False,
) -> tuple[str, str]:
    """The (mean, std) normalisation actually applied, from ROLL's overlapping knobs.

    - `norm_mean_type` / `norm_std_type` ∈ {batch, group, running, none} (None = none).
    - `use_reward_scaling` (legacy, from TRL's use_score_scaling): divide by the running std;
      with `use_reward_norm` also subtract the running mean. Only valid while both norm types are none.
    - `reward_shift`: subtract the mean only (the std type becomes none);
      `reward_scale`: divide by the std only (the mean type becomes none). Not both.
    """
    mean_type, std_type = norm_mean_type or "none", norm_std_type or "none"
    for field, value in (("norm_mean_type", mean_type), ("norm_std_type", std_type)):
        if value not in NORM_TYPES:
            raise ValueError(f"{field} {value!r} is not known; valid: {', '.join(NORM_TYPES)}")
    if use_reward_norm and not use_reward_scaling:
        raise ValueError("use_reward_norm applies only together with use_reward_scaling: true")
    if use_reward_scaling:
        if (mean_type, std_type) != ("none", "none"):
            raise ValueError(
                "use_reward_scaling cannot be combined with norm_mean_type / norm_std_type; "
                "use norm_std_type: running (and norm_mean_type: running) instead"
            )
        mean_type, std_type = ("running" if use_reward_norm else "none"), "running"
    if reward_shift and reward_scale:
        raise ValueError("reward_shift and reward_scale are exclusive (shift = mean only, scale = std only)")
    if reward_shift:
        std_type = "none"
    if reward_scale:
        mean_type = "none"
    return mean_type, std_type


def normalize_rewards(
    rewards: Tensor,
    *,
    norm_mean_type: str = "none",
    norm_std_type: str = "none",
    group_ids: Tensor | None = None,
    running: RunningMoments | None = None,
    eps: float = 1e-6,
) -> tuple[Tensor, RunningMoments | None]:
    """r ← (r − μ) / (σ + ε), μ and σ each taken from the batch, the sample's group, the running
    moments, or none (μ = 0 / σ = 1) — ROLL's `reward_norm`.

    Running moments are first updated with this batch (as ROLL does) and the new state is
    returned; pass it back next step. Edge cases: σ is unbiased; a set with zero spread, or fewer
    than 2 values, has σ treated as 1 (no division by ε), so a zero-variance group stays finite
    (and is exactly 0 when its own mean is subtracted).
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be sequence-level [batch], got shape {tuple(rewards.shape)}")
    for field, value in (("norm_mean_type", norm_mean_type), ("norm_std_type", norm_std_type)):
        if value not in NORM_TYPES:
            raise ValueError(f"{field} {value!r} is not known; valid: {', '.join(NORM_TYPES)}")
    uses_running = "running" in (norm_mean_type, norm_std_type)
    if uses_running:
        running = update_running_moments(running or RunningMoments(), rewards)
    if "group" in (norm_mean_type, norm_std_type):
        if group_ids is None:
            raise ValueError("norm type 'group' needs group_ids")
        group_mean, group_std, _ = group_mean_std(rewards, group_ids)
    batch_std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())

    def stat(kind: str, moment: str) -> Tensor:
        if kind == "batch":
            return rewards.mean() if moment == "mean" else batch_std
        if kind == "group":
            return group_mean if moment == "mean" else group_std
        if kind == "running":
            return rewards.new_tensor(running.mean if moment == "mean" else running.std)
        return rewards.new_zeros(()) if moment == "mean" else rewards.new_ones(())

    normalized = (rewards - stat(norm_mean_type, "mean")) / safe_divisor(stat(norm_std_type, "std"), eps)
    return normalized, running


def add_length_reward(
    rewards: Tensor, response_lengths: Tensor, max_response_length: int, coef: float = 1.0
) -> Tensor:
    """`add_len_reward` (our reading; ROLL declares the knob without documenting a formula):
    r ← r + coef·(1 − len/L), L = `response_length`, a bonus in [0, coef] for shorter answers
    (use a negative coef to reward length instead). Lengths are clamped to [0, L]."""
    if max_response_length <= 0:
        raise ValueError(f"response_length must be > 0, got {max_response_length}")
    fraction = response_lengths.to(rewards.dtype).clamp(0, max_response_length) / max_response_length
    return rewards + coef * (1.0 - fraction)


def apply_format_penalty(rewards: Tensor, format_ok: Tensor, format_penalty: float) -> Tensor:
    """`format_penalty` (ROLL: a negative value): r ← r + format_penalty where the format is wrong."""
    return torch.where(as_bool_mask(format_ok), rewards, rewards + format_penalty)


def difficulty_mask(
    scores: Tensor, group_ids: Tensor, low_threshold: float = 0.0, high_threshold: float = 1.0
) -> Tensor:
    """`difficulty_mask` (ROLL): keep sample i iff low < mean_{g(i)}(score) < high → bool [batch].

    With 0/1 scores and the defaults (0, 1) this drops exactly the groups that are all solved or
    all failed, whose GRPO advantages are 0 anyway. ROLL's recipes use (0.1, 0.95). Multiply the
    result into the response mask (`final_response_mask`).
    """
    mean, _, _ = group_mean_std(scores, group_ids)
    return (mean > low_threshold) & (mean < high_threshold)


def varied_groups_mask(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Keep samples whose group's rewards are not all equal (DAPO dynamic sampling) → bool [batch].
    The general-reward form of difficulty_mask; a group of one is dropped."""
    _, std, _ = group_mean_std(rewards, group_ids)
    return std > 0


def difficulty_loss_weights(difficulty: Tensor) -> Tensor:
    """`difficulty_loss_weight` (ROLL): w_i = 0.5 + 1.5·clip(difficulty_i, 0, 1), harder → heavier.
    `difficulty` [batch] comes with the data (e.g. 1 − the prompt's historical pass rate)."""
    return 0.5 + 1.5 * difficulty.clamp(0.0, 1.0)


def length_loss_weights(response_mask: Tensor) -> Tensor:
    """`length_loss_weight` (ROLL): w_i = 1.5 − (len_i − min len)/(max len − min len), in [0.5, 1.5],
    shorter → heavier; all equal lengths give 1.5 everywhere (then renormalised to 1)."""
    lengths = as_bool_mask(response_mask).sum(-1).to(torch.float32)
    if lengths.numel() == 0:
        return lengths
    spread = lengths.max() - lengths.min()
    return 1.5 - (lengths - lengths.min()) / spread.clamp(min=1e-8)


def sample_loss_weights(
    batch_size: int, *, difficulty_weights: Tensor | None = None, length_weights: Tensor | None = None
) -> Tensor:
    """Product of the chosen weights, rescaled to mean 1 (ROLL), passed as `weights` to the loss
    aggregation. No weights → ones; all-zero weights stay zero."""
    weights = torch.ones(batch_size)
    for given in (difficulty_weights, length_weights):
        if given is not None:
            weights = weights.to(given.device) * given.to(torch.float32)
    total = weights.sum()
    return weights * (batch_size / total) if total > 0 else weights
