"""Training–inference mismatch of fresh samples: importance weights and filters (ROLL's `train_infer_correction`).

The engine that samples (vLLM kernels, another precision) and the trainer that computes gradients give the
same token slightly different probabilities even with the same weights. Per token t of sample i, with π_old
actor_train's log-prob of the sampled token (its recompute before the update) and μ the engine's log-prob
of the same token (its `Generation.logprobs`):

    log ρ_it = log π_old(y_it) − log μ(y_it)       (importance ratio π_old / μ, in log space)
    δ_it     = π_old(y_it) − μ(y_it)                (difference of probabilities)

Each is read at one of ROLL's four levels (`weight_type` / `agg_type`), the value broadcast to the tokens it covers:

    token      ρ_it                                 δ_it
    geometric  exp(mean_{t ∈ i} log ρ_it)           mean_{t ∈ i} δ_it      one value per sample
    sequence   exp(Σ_{t ∈ i} log ρ_it)              Σ_{t ∈ i} δ_it         one value per sample
    segment    exp(mean_{t ∈ k} log ρ_it)           mean_{t ∈ k} δ_it      one value per segment k: a maximal
                                                                          run of consecutive real tokens (a turn
                                                                          of a multi-turn episode; the whole
                                                                          response in RLVR, = geometric)

Aggregated log-ratios are clamped to [−20, 20] before exp (ROLL exponentiates unclamped: a long sequence's
sum overflows to inf there; e^20 ≈ 5e8 lies beyond any threshold, so no filter or bounded weight changes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from trainer.algorithms.off_policy import LOG_RATIO_LIMIT
from trainer.algorithms.stats import as_bool_mask, check_same_shape, fill_masked, masked_mean

Level = Literal["token", "segment", "geometric", "sequence"]
LEVELS: tuple[Level, ...] = ("token", "segment", "geometric", "sequence")


def segment_ids(response_mask: Tensor) -> Tensor:
    """Per token, the number (1, 2, …) of the run of consecutive real tokens it belongs to in its row; 0 at
    masked tokens. [[1, 1, 0, 1, 0]] → [[1, 1, 0, 2, 0]]."""
    mask = as_bool_mask(response_mask)
    previous = torch.nn.functional.pad(mask[:, :-1], (1, 0), value=False)
    starts = mask & ~previous
    return torch.where(mask, starts.long().cumsum(-1), torch.zeros_like(starts, dtype=torch.long))


def level_reduce(values: Tensor, response_mask: Tensor, level: Level) -> Tensor:
    """`values` [B, T] read at `level`, broadcast back to [B, T]: token → itself; geometric → the sample's mean
    over its real tokens; sequence → their sum; segment → the mean over the token's segment. 0 at masked tokens."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    mask = as_bool_mask(response_mask)
    filled = fill_masked(values, mask)
    if level == "token":
        return filled
    if level == "sequence":
        return fill_masked(filled.sum(-1, keepdim=True).expand_as(filled), mask)
    if level == "geometric":
        return fill_masked(masked_mean(filled, mask, dim=-1).unsqueeze(-1).expand_as(filled), mask)
    ids = segment_ids(mask)
    rows, width = mask.shape
    flat = (torch.arange(rows, device=mask.device).unsqueeze(-1) * (width + 1) + ids).reshape(-1)
    sums = torch.zeros(rows * (width + 1), dtype=filled.dtype, device=filled.device).index_add_(0, flat, filled.reshape(-1))
    counts = torch.zeros(rows * (width + 1), dtype=filled.dtype, device=filled.device).index_add_(
        0, flat, mask.reshape(-1).to(filled.dtype))
    means = sums / counts.clamp(min=1)
    return fill_masked(means[flat].reshape(rows, width), mask)


def mismatch_ratios(old_log_probs: Tensor, infer_log_probs: Tensor, response_mask: Tensor, level: Level) -> Tensor:
    """ρ at `level` (module docstring): exp(clamp(level-reduced log π_old − log μ, −20, 20)); exactly 1 at masked
    tokens (garbage log-probs in padding never reach a result)."""
    check_same_shape(old_log_probs=old_log_probs, infer_log_probs=infer_log_probs, response_mask=response_mask)
    mask = as_bool_mask(response_mask)
    log_ratio = fill_masked(old_log_probs, mask) - fill_masked(infer_log_probs, mask)
    reduced = level_reduce(log_ratio, mask, level).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    return torch.where(mask, reduced.exp(), torch.ones_like(reduced))


def mismatch_prob_diffs(old_log_probs: Tensor, infer_log_probs: Tensor, response_mask: Tensor,
                        level: Level) -> Tensor:
    """δ at `level` (module docstring): the level-reduced π_old − μ of the sampled tokens' probabilities; 0 at
    masked tokens."""
    check_same_shape(old_log_probs=old_log_probs, infer_log_probs=infer_log_probs, response_mask=response_mask)
    mask = as_bool_mask(response_mask)
    diff = fill_masked(old_log_probs, mask).exp() - fill_masked(infer_log_probs, mask).exp()
    return level_reduce(diff, mask, level)


def importance_weights(ratios: Tensor, response_mask: Tensor, upper_bound: float | None) -> Tensor:
    """ROLL's train-infer IS weight: w_t = clamp(ρ_t, 0, U), U = `upper_bound` (None: w_t = ρ_t, untruncated);
    0 at masked tokens. A constant (π_old and μ carry no gradient) that multiplies token t's policy-gradient
    term. Example: ρ = [2, 0.6, 1.1], U = 1.2 → w = [1.2, 0.6, 1.1]."""
    if upper_bound is not None and upper_bound <= 0:
        raise ValueError(f"upper_bound must be > 0 (or None: no truncation), got {upper_bound}")
    weights = ratios.clamp(min=0.0) if upper_bound is None else ratios.clamp(0.0, upper_bound)
    return fill_masked(weights, as_bool_mask(response_mask))


def band_keep(values: Tensor, response_mask: Tensor, low: float, high: float) -> Tensor:
    """keep_t = [low ≤ v_t ≤ high] at real tokens, False at masked ones (ROLL's filter, bounds inclusive)."""
    if low > high:
        raise ValueError(f"the band is empty: low {low} > high {high}")
    return as_bool_mask(response_mask) & (values >= low) & (values <= high)


@dataclass(frozen=True)
class MismatchFilter:
    """One of ROLL's `train_infer_correction.filters`: tokens whose ρ (ratio_band) or δ (diff_band) at `level`
    falls outside the inclusive band leave the loss. A band of None is not checked."""

    level: Level = "token"
    ratio_band: tuple[float, float] | None = (0.8, 1.2)
    diff_band: tuple[float, float] | None = None


@dataclass(frozen=True)
class MismatchWeight:
    """ROLL's `train_infer_correction.is_weight`: w = clamp(ρ at `level`, 0, upper_bound)."""

    level: Level = "token"
    upper_bound: float | None = 1.2


class MismatchCorrection(NamedTuple):
    weights: Tensor  # [B, T] w_t (1 everywhere without an is_weight), 0 at masked tokens
    keep: Tensor  # [B, T] bool: real tokens every filter passes
    metrics: dict[str, float]


def _seq_token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean over samples with a real token of each sample's mean over its real tokens (ROLL's seq-mean-token-mean)."""
    rows = mask.any(-1)
    return float(masked_mean(values, mask, dim=-1)[rows].mean()) if rows.any() else 0.0


def correct_mismatch(old_log_probs: Tensor, infer_log_probs: Tensor, response_mask: Tensor, *,
                     weight: MismatchWeight | None = None,
                     filters: tuple[MismatchFilter, ...] = ()) -> MismatchCorrection:
    """ROLL's `compute_train_infer_correction` over the real tokens of `response_mask`:

        w_t    = clamp(ρ_t^(weight.level), 0, U)                      (1 without `weight`)
        keep_t = Π_f [ρ^(f.level) ∈ f.ratio_band] · [δ^(f.level) ∈ f.diff_band]   (every filter, bands inclusive)

    The loop multiplies each kept token's policy-gradient term by w_t (for w ≥ 0 the same as weighting its
    advantage, clip included) and removes the other tokens from the actor's loss mask.
    Metrics (fractions over real tokens, means seq-mean-token-mean), under ROLL's names where it has one:
    is_weight_clipfrac (ρ > U), train_infer_is_weight_mean / _max, per filter level
    train_infer_<level>_ratio_mask_mean / train_infer_<level>_diff_mask_mean (pass rate of that band alone)
    and train_infer_ratio_<level>_mean / train_infer_diff_<level>_mean, train_infer_final_mask_mean (kept
    fraction) and train_infer_masked_fraction (1 − kept). Empty mask: no metrics."""
    mask = as_bool_mask(response_mask)
    check_same_shape(old_log_probs=old_log_probs, infer_log_probs=infer_log_probs, response_mask=mask)
    metrics: dict[str, float] = {}
    has_tokens = bool(mask.any())
    if weight is None:
        weights = fill_masked(torch.ones_like(old_log_probs), mask)
    else:
        ratios = mismatch_ratios(old_log_probs, infer_log_probs, mask, weight.level)
        weights = importance_weights(ratios, mask, weight.upper_bound)
        if has_tokens:
            clipped = (ratios > weight.upper_bound) if weight.upper_bound is not None else torch.zeros_like(mask)
            metrics |= {"is_weight_clipfrac": float(masked_mean(clipped.float(), mask)),
                        "train_infer_is_weight_mean": float(masked_mean(weights, mask)),
                        "train_infer_is_weight_max": float(weights[mask].max())}
    keep = mask.clone()
    for rule in filters:
        bands = (("ratio", rule.ratio_band, mismatch_ratios), ("diff", rule.diff_band, mismatch_prob_diffs))
        for kind, band, measure in bands:
            if band is None:
                continue
            values = measure(old_log_probs, infer_log_probs, mask, rule.level)
            passed = band_keep(values, mask, *band)
            keep &= passed
            if has_tokens:
                metrics[f"train_infer_{rule.level}_{kind}_mask_mean"] = float(masked_mean(passed.float(), mask))
                metrics[f"train_infer_{kind}_{rule.level}_mean"] = _seq_token_mean(values, mask)
    if filters and has_tokens:
        kept = float(masked_mean(keep.float(), mask))
        metrics |= {"train_infer_final_mask_mean": kept, "train_infer_masked_fraction": 1.0 - kept}
    return MismatchCorrection(weights, keep, metrics)
