"""Policy, entropy, value and SFT losses, and the actor's combined loss.

Every loss takes [batch, response_len] tensors and a `response_mask`, reduces with a `LossAgg`
(knob `loss_agg_mode`, global normalisers under data parallelism) and returns
`LossOutput(loss, metrics)`: a scalar tensor and a dict of floats computed over the real tokens
of this call. Masked positions never reach the loss or its gradient (they are replaced by 0
before any arithmetic, so even inf/NaN padding is harmless).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from trainer.algorithms.aggregation import LossAgg
from trainer.algorithms.kl import kl_low_var
from trainer.algorithms.stats import as_bool_mask, check_same_shape, fill_masked, masked_mean


class LossOutput(NamedTuple):
    loss: Tensor
    metrics: dict[str, float]


def _ratio_metrics(ratio: Tensor, log_ratio: Tensor, mask: Tensor) -> dict[str, float]:
    """Over real tokens, with log r = log π − log π_old:
    approx_kl = mean(r − 1 − log r), the k3 estimate of KL(π_old ‖ π) from the rollout's samples;
    ppo_kl = mean(−log r) = mean(log π_old − log π), the k1 estimate verl logs as `actor/ppo_kl`;
    the ratio's mean and max."""
    ratio, log_ratio = ratio.detach(), log_ratio.detach()
    has_tokens = bool(mask.any())
    return {
        "approx_kl": float(masked_mean(kl_low_var(torch.zeros_like(log_ratio), log_ratio), mask)),
        "ppo_kl": float(masked_mean(-log_ratio, mask)),
        "ratio_mean": float(masked_mean(ratio, mask)),
        "ratio_max": float(ratio[mask].max()) if has_tokens else 0.0,
    }


def _check_clip(clip_low: float, clip_high: float) -> None:
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"pg_clip_low / pg_clip_high must be >= 0, got {clip_low} / {clip_high}")


def ppo_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip_c: float | None = None,
    agg: LossAgg | None = None,
    sample_weights: Tensor | None = None,
) -> LossOutput:
    """PPO clipped surrogate (knobs `pg_clip`, or `pg_clip_low`/`pg_clip_high` = clip-higher).

    r = exp(log π − log π_old),  l = max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high)).
    Dual clip (`dual_clip_loss`, Ye et al. 2020), for A < 0 only:  l = min(l, −c·A), c =
    `clip_ratio_c` > 1, so a huge ratio on a bad token cannot blow the loss up. (ROLL hard-codes
    c = 1 + 2·pg_clip; pass that value to reproduce it.)
    `sample_weights` w_i [batch] (`difficulty_loss_weight` / `length_loss_weight`) scale sample i's
    losses inside the aggregation: agg(w_i·l_it).
    Metrics: clipfrac (real tokens where the clipped branch is active), clipfrac_lower (where the
    dual clip is active; 0 without it), approx_kl (k3 of old vs new), ppo_kl (k1), ratio_mean,
    ratio_max.
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    clip_high = clip_low if clip_high is None else clip_high
    _check_clip(clip_low, clip_high)
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual clip) must be > 1, got {dual_clip_c}")
    agg = agg or LossAgg()
    mask = as_bool_mask(response_mask)
    log_ratio = fill_masked(log_probs, mask) - fill_masked(old_log_probs, mask)
    advantages = fill_masked(advantages, mask)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    losses = torch.maximum(unclipped, clipped)
    metrics = {"clipfrac": float(masked_mean((clipped > unclipped).float(), mask)), "clipfrac_lower": 0.0}
    if dual_clip_c is not None:
        capped = -advantages * dual_clip_c
        negative = advantages < 0
        metrics["clipfrac_lower"] = float(masked_mean(((losses > capped) & negative).float(), mask))
        losses = torch.where(negative, torch.minimum(losses, capped), losses)
    metrics |= _ratio_metrics(ratio, log_ratio, mask)
    loss = agg(losses, mask, sample_weights)
    metrics["pg_loss"] = float(loss.detach())
    return LossOutput(loss, metrics)


def pg_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    agg: LossAgg | None = None,
    sample_weights: Tensor | None = None,
) -> LossOutput:
    """Plain policy gradient (REINFORCE with the given advantages; ROLL `use_policy_loss_type: PG`, the
    `vanilla` objective of its ActorPGWorker, `-log_probs * advantages`):

        l_it = −A_it · log π_it

    No ratio and no clip: ∇l = −A·∇log π whatever π_old. On the first update of fresh samples (π = π_old,
    r = 1, no clip active) this is PPO's gradient; on later mini-batches and epochs of the same rollout
    nothing pulls the update back toward π_old. `old_log_probs` only feed the metrics.
    `sample_weights` as in ppo_policy_loss.
    Metrics: approx_kl, ppo_kl, ratio_mean, ratio_max of r = π/π_old (monitoring only), pg_loss.
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    agg = agg or LossAgg()
    mask = as_bool_mask(response_mask)
    log_probs = fill_masked(log_probs, mask)
    log_ratio = log_probs.detach() - fill_masked(old_log_probs, mask)
    losses = -fill_masked(advantages, mask) * log_probs
    metrics = _ratio_metrics(log_ratio.exp(), log_ratio, mask)
    loss = agg(losses, mask, sample_weights)
    metrics["pg_loss"] = float(loss.detach())
    return LossOutput(loss, metrics)


def gspo_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float | None = 4e-4,
    agg: LossAgg | None = None,
    sample_weights: Tensor | None = None,
) -> LossOutput:
    """GSPO (Zheng et al. 2025; ROLL `importance_sampling: seq`): sequence-level ratio.

    s_i = exp( (1/|y_i|)·Σ_t (log π − log π_old) )  (geometric mean of token ratios), used per token
    as s_it = sg(s_i)·π_t/sg(π_t) so that its value is s_i and its gradient flows through each token;
    l_it = max(−A_it·s_it, −A_it·clip(s_it, 1 − ε_low, 1 + ε_high)). log s is capped at 10 (verl).
    The pipeline passes ε_low / ε_high from `pg_clip_low` / `pg_clip_high` (else `pg_clip`), as verl
    (`clip_ratio_low/high`) and ROLL do; the paper's ε, which are these defaults, are 3e-4 / 4e-4 —
    far below PPO's 0.2, since s_i is a per-token geometric mean and stays near 1. Aggregate with
    seq-mean-token-mean to match the paper. `sample_weights` as in ppo_policy_loss.
    Metrics: clipfrac, approx_kl / ppo_kl (of the token ratios), ratio_mean, ratio_max (of s).
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    clip_high = clip_low if clip_high is None else clip_high
    _check_clip(clip_low, clip_high)
    agg = agg or LossAgg("seq-mean-token-mean")
    mask = as_bool_mask(response_mask)
    log_probs = fill_masked(log_probs, mask)
    token_log_ratio = log_probs - fill_masked(old_log_probs, mask)
    seq_log_ratio = masked_mean(token_log_ratio, mask, dim=-1)
    log_ratio = (log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)).clamp(max=10.0)
    advantages = fill_masked(advantages, mask)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    losses = fill_masked(torch.maximum(unclipped, clipped), mask)
    metrics = {"clipfrac": float(masked_mean((clipped > unclipped).float(), mask))}
    metrics |= _ratio_metrics(ratio, token_log_ratio, mask)
    loss = agg(losses, mask, sample_weights)
    metrics["pg_loss"] = float(loss.detach())
    return LossOutput(loss, metrics)


def topr_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    scores: Tensor,
    *,
    agg: LossAgg | None = None,
    sample_weights: Tensor | None = None,
) -> LossOutput:
    """TOPR, Tapered Off-Policy REINFORCE (Le Roux et al. 2025, arXiv 2503.14286; `use_topr_loss`).

    ∇J = Σ_{R≥0} R·∇log π(τ) + Σ_{R<0} clip(π(τ)/μ(τ), 0, 1)·R·∇log π(τ)
    Our reading, per token: l_it = −w_i·A_it·log π_it with w_i = 1 for positive samples
    (score_i > 0, plain SFT-like push) and w_i = sg(clip(exp(Σ_t log π − log μ), 0, 1)) for the
    others (truncated importance sampling on negatives, no gradient through the weight). The sign
    comes from `scores` [batch] (the sequence reward, as ROLL splits on `scores > 0`); the size
    from the advantages. `sample_weights` as in ppo_policy_loss (multiplied with w_i above).
    Metrics: negative_weight_mean, positive_fraction, approx_kl, ppo_kl, ratio_*.
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    mask = as_bool_mask(response_mask)
    if scores.shape != (mask.shape[0],):
        raise ValueError(f"scores must have shape ({mask.shape[0]},), got {tuple(scores.shape)}")
    agg = agg or LossAgg()
    log_probs = fill_masked(log_probs, mask)
    log_ratio = log_probs - fill_masked(old_log_probs, mask)
    seq_ratio = log_ratio.detach().sum(-1).clamp(max=0.0).exp()  # clip(π/μ, 0, 1) in log space
    positive = scores > 0
    weights = torch.where(positive, torch.ones_like(seq_ratio), seq_ratio)
    losses = -weights.unsqueeze(-1) * fill_masked(advantages, mask) * log_probs
    negative_rows = ~positive & mask.any(-1)
    metrics = {
        "negative_weight_mean": float(seq_ratio[negative_rows].mean()) if negative_rows.any() else 0.0,
        "positive_fraction": float(positive.float().mean()) if positive.numel() else 0.0,
    }
    metrics |= _ratio_metrics(log_ratio.exp(), log_ratio, mask)
    loss = agg(losses, mask, sample_weights)
    metrics["pg_loss"] = float(loss.detach())
    return LossOutput(loss, metrics)


def topr_token_policy_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    scores: Tensor,
    *,
    positive_weight: float = 1.0,
    negative_weight: float = 1.0,
    agg: LossAgg | None = None,
    sample_weights: Tensor | None = None,
) -> LossOutput:
    """TOPR as ROLL's `actor_train.pg_variant: topr` computes it (`compute_topr_pg_loss_mat`), with
    per-token ratios r_it = exp(log π_it − log π_old,it) and the knobs w₊ = `topr_positive_weight`,
    w₋ = `topr_negative_weight`:

        l_it = w₊·(−A_it·log π_it)                       if score_i > 0   (SFT-like, no ratio)
        l_it = w₋·(−sg(clip(r_it, 0, 1))·A_it·log π_it)  if score_i ≤ 0   (truncated IS, no gradient
                                                                          through the weight)
    The sign comes from `scores` [batch] (the sequence reward, as ROLL splits on `scores > 0`).
    `topr_policy_loss` is the paper's sequence-level reading (`use_topr_loss`); this is ROLL's
    token-level one. `sample_weights` as in ppo_policy_loss.
    Metrics: positive_fraction, negative_clipfrac (negative samples' real tokens with r outside
    [0, 1]), approx_kl, ppo_kl, ratio_*.
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    mask = as_bool_mask(response_mask)
    if scores.shape != (mask.shape[0],):
        raise ValueError(f"scores must have shape ({mask.shape[0]},), got {tuple(scores.shape)}")
    agg = agg or LossAgg()
    log_probs = fill_masked(log_probs, mask)
    log_ratio = log_probs - fill_masked(old_log_probs, mask)
    ratio = log_ratio.detach().exp()
    positive = (scores > 0).unsqueeze(-1)
    weights = torch.where(positive, torch.full_like(ratio, positive_weight), negative_weight * ratio.clamp(0.0, 1.0))
    losses = -weights * fill_masked(advantages, mask) * log_probs
    negative_tokens = mask & ~positive
    metrics = {
        "positive_fraction": float((scores > 0).float().mean()) if scores.numel() else 0.0,
        "negative_clipfrac": float(masked_mean((ratio > 1.0).float(), negative_tokens)),
    }
    metrics |= _ratio_metrics(ratio, log_ratio, mask)
    loss = agg(losses, mask, sample_weights)
    metrics["pg_loss"] = float(loss.detach())
    return LossOutput(loss, metrics)


def topr_negative_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    scores: Tensor,
    agg: LossAgg | None = None,
) -> Tensor:
    """TOPR's negative-sample term that ROLL adds to the PPO loss with `use_topr_neg_loss_coef`:

        agg over real tokens of samples with score_i ≤ 0 of  −sg(clip(r_it, 0, 1))·A_it·log π_it,
        r_it = exp(log π_it − log π_old,it).
    The mask is the negative samples' tokens, so a local token-mean divides by their count, as ROLL does
    per micro-batch; with `agg`'s global normaliser (data parallelism, the pipeline) it divides by all
    tokens of the mini-batch instead, as sft_loss does. No negative sample → 0.
    """
    check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    mask = as_bool_mask(response_mask) & (scores <= 0).unsqueeze(-1)
    log_probs = fill_masked(log_probs, mask)
    clipped_ratio = (log_probs.detach() - fill_masked(old_log_probs, mask)).exp().clamp(0.0, 1.0)
    return (agg or LossAgg())(-clipped_ratio * fill_masked(advantages, mask) * log_probs, mask)


def sft_loss(
    log_probs: Tensor, response_mask: Tensor, positive: Tensor, agg: LossAgg | None = None
) -> Tensor:
    """NLL on positive samples (`sft_loss_coef`): agg(−log π_t) over real tokens of samples with
    positive[i] (e.g. score > 0). No positive sample → 0 (with token-mean / seq-mean modes).

    ROLL weights this term by π_old(y)·score; we keep the plain NLL the knob's description names.
    """
    mask = as_bool_mask(response_mask) & as_bool_mask(positive).unsqueeze(-1)
    return (agg or LossAgg())(-fill_masked(log_probs, mask), mask)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """H = logsumexp(z) − Σ_v softmax(z)_v·z_v per position: [..., vocab] → [...]."""
    logits = logits.float()
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def entropy_loss(token_entropy: Tensor, response_mask: Tensor, agg: LossAgg | None = None) -> Tensor:
    """Aggregated entropy of the real tokens (subtracted with `entropy_loss_coef` in actor_loss), from
    the per-token entropy [batch, len] (entropy_from_logits).

    The logits are not copied to mask them ([batch, len, vocab] is the largest tensor in training);
    the per-token entropy is masked instead, so logits at padding must merely be finite (a model's
    always are) for them to get exactly zero gradient.
    """
    return (agg or LossAgg())(token_entropy, response_mask)


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    *,
    value_clip: float | None = None,
    agg: LossAgg | None = None,
) -> LossOutput:
    """Critic loss (knob `value_clip`): ½·agg(max((V − R)², (V_clip − R)²)),
    V_clip = V_old + clip(V − V_old, −value_clip, value_clip); without value_clip ½·agg((V − R)²).
    Metrics: vf_clipfrac (real tokens where the clipped branch is larger), vpred_mean.
    """
    check_same_shape(values=values, old_values=old_values, returns=returns, response_mask=response_mask)
    if value_clip is not None and value_clip < 0:
        raise ValueError(f"value_clip must be >= 0, got {value_clip}")
    agg = agg or LossAgg()
    mask = as_bool_mask(response_mask)
    values, old_values, returns = (fill_masked(t, mask) for t in (values, old_values, returns))
    unclipped = (values - returns).square()
    if value_clip is None:
        losses, clipfrac = unclipped, 0.0
    else:
        clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped = (clipped_values - returns).square()
        losses = torch.maximum(unclipped, clipped)
        clipfrac = float(masked_mean((clipped > unclipped).float(), mask))
    loss = 0.5 * agg(losses, mask)
    return LossOutput(
        loss,
        {
            "vf_loss": float(loss.detach()),
            "vf_clipfrac": clipfrac,
            "vpred_mean": float(masked_mean(values.detach(), mask)),
        },
    )


def actor_loss(
    pg_loss: Tensor,
    *,
    rl_loss_coef: float = 1.0,
    sft: Tensor | None = None,
    sft_loss_coef: float = 0.0,
    kl: Tensor | None = None,
    kl_loss_coef: float = 0.0,
    entropy: Tensor | None = None,
    entropy_loss_coef: float = 0.0,
    topr_negative: Tensor | None = None,
    use_topr_neg_loss_coef: float = 0.0,
) -> Tensor:
    """total = rl_loss_coef·pg + sft_loss_coef·sft + kl_loss_coef·kl − entropy_loss_coef·entropy
             + use_topr_neg_loss_coef·topr_negative  (ROLL's TOPR term on negative samples).

    A term whose tensor is None is left out; a non-zero coefficient without its term is an error.
    """
    total = rl_loss_coef * pg_loss
    for name, term, coef, sign in (
        ("sft_loss_coef", sft, sft_loss_coef, 1.0),
        ("kl_loss_coef", kl, kl_loss_coef, 1.0),
        ("entropy_loss_coef", entropy, entropy_loss_coef, -1.0),
        ("use_topr_neg_loss_coef", topr_negative, use_topr_neg_loss_coef, 1.0),
    ):
        if term is None:
            if coef != 0.0:
                raise ValueError(f"{name}={coef} but its loss term was not given")
            continue
        total = total + sign * coef * term
    return total


# Names the pipeline selects a policy loss by: `ppo` (with `dual_clip_loss` → dual_clip_c), `pg` (ROLL
# `use_policy_loss_type: PG`), `gspo` (ROLL `importance_sampling: seq`, verl `loss_mode: gspo`), `topr`
# (`use_topr_loss`), `topr_token` (ROLL `actor_train.pg_variant: topr`). The TOPR losses take `scores` too.
POLICY_LOSSES: dict[str, Callable[..., LossOutput]] = {
    "ppo": ppo_policy_loss,
    "pg": pg_policy_loss,
    "gspo": gspo_policy_loss,
    "topr": topr_policy_loss,
    "topr_token": topr_token_policy_loss,
}
