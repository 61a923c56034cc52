"""Which samples and prompt groups reach the loss, and length shaping of the reward (ROLL's
`max_len_mask`, `error_max_len_clip`, `query_filter_config`, `response_length_penalty_coef`).

Pure tensor functions: `scores` [batch] are raw sequence rewards, `group_ids` [batch] mark the samples
of one prompt, `response_lengths` [batch] count real response tokens. Masks are bool [batch], True =
keep the sample in the actor's loss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from trainer.algorithms.stats import group_mean_std

QUERY_FILTERS: tuple[str, ...] = ("no_filter", "mean_filter", "std_filter")


def max_len_keep(response_lengths: Tensor, max_length: int) -> Tensor:
    """`max_len_mask` (ROLL `get_sample_level_mask`): keep_i = len_i ≠ L, L the response limit.

    A response as long as the limit was cut off (or ended exactly there, which ROLL cannot tell
    apart either): its reward judges an unfinished answer, so it leaves the loss."""
    return response_lengths != max_length


def error_length_keep(scores: Tensor, response_lengths: Tensor, threshold: int) -> Tensor:
    """`error_max_len_clip` (ROLL): keep_i = (s_i = 1) ∨ (s_i = 0 ∧ len_i < T), T = `error_max_len_threshold`.

    Wrong answers (score 0) of T tokens or more leave the loss. As in ROLL the rule is written for
    0/1 correctness scores: a sample scored anything else is left out too."""
    return (scores == 1) | ((scores == 0) & (response_lengths < threshold))


def response_length_reward(response_lengths: Tensor, min_len: int = 100, max_len: int = 400) -> Tensor:
    """ROLL's `get_response_length_reward`, which `response_length_penalty_coef` weighs:

        ρ(len) = −0.5                                   len < min_len
                 −0.5·(max_len − len)/(max_len − min_len)   min_len ≤ len ≤ max_len
                 0                                      len > max_len
    i.e. a penalty of up to 0.5 for short responses, fading linearly to 0 at max_len (ROLL's
    constants 100 and 400 tokens)."""
    if max_len <= min_len:
        raise ValueError(f"max_len must exceed min_len, got {min_len} / {max_len}")
    lengths = response_lengths.to(torch.float32)
    ramp = -0.5 * (max_len - lengths) / (max_len - min_len)
    return torch.where(lengths < min_len, torch.full_like(lengths, -0.5),
                       torch.where(lengths > max_len, torch.zeros_like(lengths), ramp))


def query_filter_keep(scores: Tensor, group_ids: Tensor, kind: str, args: Mapping[str, float]) -> Tensor:
    """ROLL's `query_filter_fn` per prompt group g (every sample of a dropped group is dropped):

        mean_filter: drop g iff mean_g(s) ≤ threshold_down (default −1) or mean_g(s) ≥ threshold_up (default ∞)
        std_filter:  drop g iff std_g(s) ≤ std_threshold (default −1; unbiased std, as torch.std)
        no_filter:   keep every group
    A group of one sample is always kept (ROLL). std_threshold: 0 drops exactly the groups whose
    rewards are all equal — they carry no GRPO signal (DAPO's dynamic sampling)."""
    if kind not in QUERY_FILTERS:
        raise ValueError(f"query filter {kind!r} is not known; valid: {', '.join(QUERY_FILTERS)}")
    mean, std, size = group_mean_std(scores.to(torch.float32), group_ids)
    if kind == "mean_filter":
        drop = (mean <= args.get("threshold_down", -1.0)) | (mean >= args.get("threshold_up", math.inf))
    elif kind == "std_filter":
        drop = std <= args.get("std_threshold", -1.0)
    else:
        drop = torch.zeros_like(mean, dtype=torch.bool)
    return ~drop | (size <= 1)


def zero_variance_groups(scores: Tensor, group_ids: Tensor, keep: Tensor | None = None) -> tuple[int, int]:
    """(groups whose rewards are all equal, groups) among the groups with a kept sample."""
    _, std, size = group_mean_std(scores.to(torch.float32), group_ids)
    keep = torch.ones_like(std, dtype=torch.bool) if keep is None else keep
    flat = {}
    for group, is_flat, kept in zip(group_ids.tolist(), ((std == 0) | (size <= 1)).tolist(), keep.tolist(),
                                    strict=True):
        if kept:
            flat[group] = is_flat
    return sum(flat.values()), len(flat)
