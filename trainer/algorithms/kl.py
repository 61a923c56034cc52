"""KL estimators (knob `kl_penalty`), KL in the reward, KL as a loss, and KL coefficient controllers.

With log r = log π(y_t) − log π_ref(y_t) at the sampled token (Schulman, "Approximating KL
divergence"):
  `kl`  (k1)          log r                        unbiased, can be negative
  `abs`               |log r|
  `mse` (k2)          ½ (log r)²
  `low_var_kl` (k3)   exp(−log r) + log r − 1      ≥ 0, unbiased; clamped to [−10, 10] as verl does
  `full`              Σ_v π(v)(log π(v) − log π_ref(v))   exact, needs both logits
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from trainer.algorithms.aggregation import LossAgg
from trainer.algorithms.stats import as_bool_mask, check_same_shape, fill_masked, masked_mean


def kl_k1(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """`kl`: log π − log π_ref."""
    return log_probs - ref_log_probs


def kl_abs(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """`abs`: |log π − log π_ref|."""
    return (log_probs - ref_log_probs).abs()


def kl_mse(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """`mse` (k2): ½ (log π − log π_ref)²."""
    return 0.5 * (log_probs - ref_log_probs).square()


def kl_low_var(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """`low_var_kl` (k3): e^d − d − 1 with d = log π_ref − log π clamped to [−20, 20], result
    clamped to [−10, 10] (verl's bounds, which keep one wild token from dominating)."""
    d = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
    return (d.exp() - d - 1.0).clamp(-10.0, 10.0)


def kl_full(logits: Tensor, ref_logits: Tensor) -> Tensor:
    """`full`: exact KL(π ‖ π_ref) per position from logits [..., vocab] → [...]."""
    check_same_shape(logits=logits, ref_logits=ref_logits)
    log_p = F.log_softmax(logits.float(), dim=-1)
    log_q = F.log_softmax(ref_logits.float(), dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1)


# The `kl_penalty` names fixed in docs/decisions/0001. `full` takes (logits, ref_logits); the others
# take the sampled tokens' (log_probs, ref_log_probs).
KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "kl": kl_k1,
    "abs": kl_abs,
    "mse": kl_mse,
    "low_var_kl": kl_low_var,
    "full": kl_full,
}


def token_kl(
    kl_penalty: str,
    response_mask: Tensor,
    *,
    log_probs: Tensor | None = None,
    ref_log_probs: Tensor | None = None,
    logits: Tensor | None = None,
    ref_logits: Tensor | None = None,
) -> Tensor:
    """Per-token KL [batch, response_len] by the named estimator; exactly 0 at masked positions."""
    if kl_penalty not in KL_ESTIMATORS:
        raise ValueError(f"kl_penalty {kl_penalty!r} is not known; valid: {', '.join(KL_ESTIMATORS)}")
    if kl_penalty == "full":
        if logits is None or ref_logits is None:
            raise ValueError("kl_penalty 'full' needs `logits` and `ref_logits` (the whole vocabulary)")
        # Mask the [batch, len] result, not the vocabulary-sized logits (no copy of the largest tensor).
        return fill_masked(kl_full(logits, ref_logits), response_mask)
    if log_probs is None or ref_log_probs is None:
        raise ValueError(f"kl_penalty {kl_penalty!r} needs `log_probs` and `ref_log_probs`")
    check_same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs, response_mask=response_mask)
    estimate = KL_ESTIMATORS[kl_penalty](
        fill_masked(log_probs, response_mask), fill_masked(ref_log_probs, response_mask)
    )
    return fill_masked(estimate, response_mask)


def scores_to_token_rewards(scores: Tensor, response_mask: Tensor) -> Tensor:
    """Place each sequence reward [batch] on its last real token → [batch, response_len].

    A sample with an empty mask gets no reward anywhere.
    """
    mask = as_bool_mask(response_mask)
    if scores.shape != (mask.shape[0],):
        raise ValueError(f"scores must have shape ({mask.shape[0]},), got {tuple(scores.shape)}")
    positions = torch.arange(mask.shape[-1], device=mask.device).expand(mask.shape)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(-1).values
    token_rewards = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    has_tokens = last >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    token_rewards[rows, last[has_tokens]] = scores[has_tokens]
    return token_rewards


def add_kl_to_rewards(
    scores: Tensor, token_kl_values: Tensor, response_mask: Tensor, kl_coef: float
) -> tuple[Tensor, float]:
    """KL in the reward (`add_token_level_kl`, verl `use_kl_in_reward`): r_t = score·[t = last] − β·kl_t.

    Returns (token_level_rewards, mean KL) where mean KL = mean over samples of each sample's
    masked mean KL (the value the KL controller is updated with; samples with empty masks count 0).
    """
    check_same_shape(token_kl_values=token_kl_values, response_mask=response_mask)
    kl_values = fill_masked(token_kl_values, response_mask)
    rewards = scores_to_token_rewards(scores, response_mask) - kl_coef * kl_values
    current_kl = float(masked_mean(kl_values, response_mask, dim=-1).mean()) if kl_values.numel() else 0.0
    return fill_masked(rewards, response_mask), current_kl


def kl_loss(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    response_mask: Tensor,
    kl_penalty: str = "low_var_kl",
    agg: LossAgg | None = None,
) -> Tensor:
    """KL as a loss (`use_kl_loss`; weighted by `kl_loss_coef` in policy_loss.actor_loss):
    agg(kl_t) with the chosen estimator, k3 by default as in verl/ROLL GRPO recipes."""
    agg = agg or LossAgg()
    return agg(
        token_kl(kl_penalty, response_mask, log_probs=log_probs, ref_log_probs=ref_log_probs), response_mask
    )


@dataclass(frozen=True)
class FixedKLController:
    """β stays `init_kl_coef` forever."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> FixedKLController:
        return self


@dataclass(frozen=True)
class AdaptiveKLController:
    """Ziegler et al. (2019): β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n_steps/horizon).

    `update` is pure: it returns the next controller and leaves this one untouched.
    """

    value: float
    target: float
    horizon: int

    def __post_init__(self) -> None:
        if self.target <= 0:
            raise ValueError(f"target_kl must be > 0 for the adaptive KL controller, got {self.target}")
        if self.horizon <= 0:
            raise ValueError(f"kl_horizon must be > 0, got {self.horizon}")

    def update(self, current_kl: float, n_steps: int) -> AdaptiveKLController:
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        return replace(self, value=self.value * (1.0 + proportional_error * n_steps / self.horizon))


def make_kl_controller(
    init_kl_coef: float,
    target_kl: float | None = None,
    kl_horizon: int = 10000,
    ctrl_type: str | None = None,
) -> FixedKLController | AdaptiveKLController:
    """The controller `kl_ctrl_type` names (verl `algorithm.kl_ctrl.type`):

      `fixed`     β = `init_kl_coef` forever (a set `target_kl` is unused);
      `adaptive`  β₀ = `init_kl_coef`, steered toward `target_kl` with time constant `kl_horizon`
                  (AdaptiveKLController); needs `target_kl`;
      None        ROLL's rule (ROLL has no type knob): adaptive exactly when `target_kl` is set.
    """
    if init_kl_coef < 0:
        raise ValueError(f"init_kl_coef must be >= 0, got {init_kl_coef}")
    if ctrl_type is None:
        ctrl_type = "fixed" if target_kl is None else "adaptive"
    if ctrl_type == "fixed":
        return FixedKLController(init_kl_coef)
    if ctrl_type != "adaptive":
        raise ValueError(f"kl_ctrl_type {ctrl_type!r} is not known; valid: fixed, adaptive")
    if target_kl is None:
        raise ValueError("kl_ctrl_type adaptive needs a target_kl to steer toward")
    return AdaptiveKLController(init_kl_coef, target_kl, kl_horizon)
