"""Masked and grouped statistics shared by the estimators and losses.

Masks: a `response_mask` may be bool or float; any non-zero entry is a real token. Every function
here first replaces masked-out entries by 0 with `torch.where` (never `x * mask`), so NaN or inf
sitting in padding can neither leak into a result nor poison a gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor


def as_bool_mask(mask: Tensor) -> Tensor:
    """`mask != 0` as a bool tensor (1 = real token)."""
    return mask if mask.dtype == torch.bool else mask != 0


def check_same_shape(**tensors: Tensor) -> None:
    """Raise ValueError naming every argument when the tensors' shapes differ."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{name}={shape}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listing}; these arguments must have the same shape")


def fill_masked(values: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """values where mask, else `fill` (gradient to masked entries is exactly 0)."""
    return torch.where(as_bool_mask(mask), values, torch.full_like(values, fill))


def discounted_scan(values: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Return-to-go along the last dim over the real (mask) positions: G_t = x_t + γ·G_{t'}, t' the next real
    position (G after the last = 0); 0 at masked positions. Token returns and GiGPO's step returns both."""
    check_same_shape(values=values, mask=mask)
    mask = as_bool_mask(mask)
    values = fill_masked(values, mask)
    returns = torch.zeros_like(values)
    running = torch.zeros_like(values[..., 0])
    for t in reversed(range(values.shape[-1])):
        running = torch.where(mask[..., t], values[..., t] + gamma * running, running)
        returns[..., t] = running
    return fill_masked(returns, mask)


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ values·mask over `dim` (all elements when dim is None)."""
    filled = fill_masked(values, mask)
    return filled.sum() if dim is None else filled.sum(dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ values·mask / Σ mask; 0 where the mask is empty (never NaN)."""
    count = as_bool_mask(mask).sum() if dim is None else as_bool_mask(mask).sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance over the real entries: Σ (x − x̄)² / (n − 1) (or / n); 0 when n < 2."""
    bool_mask = as_bool_mask(mask)
    n = bool_mask.sum()
    centred = fill_masked(values - masked_mean(values, bool_mask), bool_mask)
    denominator = (n - 1) if unbiased else n
    return centred.square().sum() / denominator.clamp(min=1)


def masked_whiten(values: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(x − x̄) / sqrt(var + eps) over the real entries (unbiased var, as verl/ROLL); 0 at masked ones.

    shift_mean=False adds x̄ back (scale only). An empty mask gives all zeros; a single real entry
    has var 0 and whitens to 0 (or to itself with shift_mean=False).
    """
    bool_mask = as_bool_mask(mask)
    mean = masked_mean(values, bool_mask)
    whitened = (fill_masked(values, bool_mask) - mean) * torch.rsqrt(masked_var(values, bool_mask) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return fill_masked(whitened, bool_mask)


def group_mean_std(
    values: Tensor, group_ids: Tensor, valid: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample statistics of the sample's group: (mean, unbiased std, group size), each [batch].

    Groups are the distinct values of `group_ids` [batch] (need not be contiguous). Samples with
    valid=False (e.g. an empty response mask) take no part in any group's statistics; their own
    entries still get their group's numbers. A group with fewer than 2 valid members has std 0;
    a group with no valid member has mean 0.
    """
    if values.dim() != 1 or group_ids.shape != values.shape:
        raise ValueError(
            f"group_ids must be a 1-D tensor with one id per sample: values has shape {tuple(values.shape)}, "
            f"group_ids has shape {tuple(group_ids.shape)}"
        )
    valid = torch.ones_like(values, dtype=torch.bool) if valid is None else as_bool_mask(valid)
    _, index = torch.unique(group_ids, return_inverse=True)
    num_groups = int(index.max()) + 1 if index.numel() else 0
    x = fill_masked(values, valid)
    weight = valid.to(values.dtype)
    count = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, index, weight)
    total = torch.zeros_like(count).index_add_(0, index, x)
    mean = total / count.clamp(min=1)
    squared = fill_masked((values - mean[index]).square(), valid)
    sq_total = torch.zeros_like(count).index_add_(0, index, squared)
    std = torch.where(count > 1, (sq_total / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(count))
    return mean[index], std[index], count[index]


def safe_divisor(std: Tensor, eps: float) -> Tensor:
    """std + eps, but 1 where std == 0 (a constant set has no scale to remove, so leave it as is)."""
    return torch.where(std > 0, std + eps, torch.ones_like(std))


def clip_fraction(values: Tensor, low: float, high: float, mask: Tensor | None = None) -> float:
    """Fraction of (real) entries outside [low, high]; 0.0 when there are none."""
    outside = (values < low) | (values > high)
    if mask is None:
        return float(outside.float().mean()) if outside.numel() else 0.0
    return float(masked_mean(outside.float(), mask))
