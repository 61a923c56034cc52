"""verl's rollout correction and bypass mode for the verl importer (trainer.config.importers.verl): main's
`algorithm.rollout_correction`, v0.6's `algorithm.rollout_is*`, v0.5's `actor.tis_imp_ratio_cap` -> the native
train_infer_correction, and bypass mode -> use_rollout_log_probs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.config.importers.common import (
    MISMATCH,
    mismatch_filter,
    mismatch_weight,
    positive_number,
)
from trainer.config.importers.rules import Translation
from trainer.config.importers.verl_rules import ARR, LEVELS, LOG_PROBS, RC


def bypass(t: Translation) -> None:
    """verl main's bypass mode reuses the engine's log-probs as the old ones (use_rollout_log_probs); its PPO-clip
    loss then needs no IS weight. Its REINFORCE loss, and IS / rejection computed in bypass mode against the current
    policy in each micro-batch, are not built: refused, naming the override that runs the file without them."""
    for key, bad in (("use_policy_gradient", True), ("loss_type", "reinforce")):
        value = t.get(f"{RC}.{key}")
        if key == "loss_type" and value not in (None, "ppo_clip", "reinforce"):
            t.error(f"{RC}.loss_type", f"= {value!r} is not a loss_type this importer knows; valid: ppo_clip, reinforce; "
                    f"to train PPO with this file, use the override {RC}.loss_type=ppo_clip")
        elif value == bad:
            fix = "false" if key == "use_policy_gradient" else "ppo_clip"
            t.error(f"{RC}.{key}", f"= {value!r} is refused: verl's REINFORCE loss with rollout IS weights "
                    f"(-w·A·log pi) is not built, and PPO would train something else; to train PPO with this file, "
                    f"use the override {RC}.{key}={fix}")
    if not t.get(f"{RC}.bypass_mode"):
        return
    other = next((k for k in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold") if t.has(f"{RC}.{k}")), None)
    if other is not None:
        t.error(f"{RC}.bypass_mode", f"= True with {other} is refused: in bypass mode verl computes its IS weights and "
                "rejection between the current policy and the engine inside every micro-batch, which is not built; "
                "to correct pi_old / pi_rollout once per batch (train_infer_correction) instead, use the override "
                f"{RC}.bypass_mode=false")
        return
    t.set("use_rollout_log_probs", True, f"{RC}.bypass_mode")


@dataclass
class _Correction:
    """One of verl's spellings of the rollout correction, in native terms."""

    source: str  # the key that switches it on
    weight: dict[str, Any] | None = None
    filters: list[dict[str, Any]] = field(default_factory=list)
    filter_source: str = ""


def rollout_correction(t: Translation, has_critic: bool) -> None:
    """verl's correction of the rollout-training mismatch (main's rollout_correction, v0.6's flat rollout_is*, v0.5's
    tis_imp_ratio_cap) as train_infer_correction. verl computes it from the recomputed old log-probs and the engine's
    (collected only with rollout.calculate_log_probs: true; without them verl applies nothing) once per batch, the
    weight multiplying the policy loss and rejected tokens leaving the response mask: the native pipeline-level path
    (docs/decisions/0040), same formulas. verl rejects before computing advantages, so estimators with batch
    statistics (all but grpo and rloo) and the critic see fewer tokens there: a warning says so."""
    if t.get(f"{RC}.bypass_mode"):
        return  # use_rollout_log_probs, or refused (bypass)
    found = [c for c in (_correction_main(t), _correction_v06(t), _tis_cap(t)) if c is not None]
    if not t.get(LOG_PROBS):
        for corr in found:
            t.warn(corr.source, f"= {t.get(corr.source)!r} not imported: verl applies its rollout correction only with "
                   f"{LOG_PROBS}: true (the engine's log-probs are not collected otherwise); set it to import this "
                   "as train_infer_correction")
        return
    if not found and t.written(LOG_PROBS):
        t.warn(LOG_PROBS, "= True not imported: rollout log-probs are always computed here (rollout/logprob_diff_*); "
               "it only enables verl's rollout correction, which this file does not set")
    estimator = t.native.get("adv_estimator", "gae")
    for corr in found:
        if corr.weight is not None:
            t.set(f"{MISMATCH}.is_weight", corr.weight, corr.source)
        if not corr.filters:
            continue
        t.set(f"{MISMATCH}.filters", corr.filters, corr.filter_source)
        if has_critic or estimator not in ("grpo", "rloo"):
            where = " and in the critic's value loss" if has_critic else ""
            t.warn(corr.filter_source, f"imported as a filter of the actor's loss; verl also removes the rejected "
                   f"tokens from the response mask before the advantages are computed, so here they still count in "
                   f"{estimator}'s batch statistics{where}")


def _level(t: Translation, path: str, valid: tuple[str, ...], default: str | None = None) -> str | None:
    value = t.get(path, default)
    if value is not None and value not in valid:
        t.error(path, f"= {value!r} is not a level this importer knows; valid: {', '.join(valid)}; to run this file "
                f"without it, use the override ~{path}")
        return None
    return value


def _unused(t: Translation, keys: tuple[str, ...], why: str) -> None:
    for key in keys:
        if t.written(key):
            t.warn(key, f"= {t.get(key)!r} not imported: {why}")


def _correction_main(t: Translation) -> _Correction | None:
    """main: rollout_is (token / sequence) → weight min(rho, rollout_is_threshold); rollout_rs (token / sequence /
    geometric) → a filter with band [rollout_rs_threshold_lower or 1 / upper, rollout_rs_threshold or
    rollout_is_threshold]."""
    level, rs = t.get(f"{RC}.rollout_is"), t.get(f"{RC}.rollout_rs")
    thresholds = (f"{RC}.rollout_rs_threshold", f"{RC}.rollout_rs_threshold_lower")
    if rs is None:
        _unused(t, thresholds, "used only with rollout_rs")
    if level is None and (rs is None or t.has(thresholds[0])):
        _unused(t, (f"{RC}.rollout_is_threshold",), "used only with rollout_is (or rollout_rs without a threshold)")
    if level is None and rs is None:
        return None
    corr = _Correction(source=f"{RC}.rollout_is" if level is not None else f"{RC}.rollout_rs")
    if level is not None:
        level = _level(t, f"{RC}.rollout_is", ("token", "sequence"))
        bound = positive_number(t, f"{RC}.rollout_is_threshold", 2.0)
        if level is None or bound is None:
            return None
        corr.weight = mismatch_weight(level, bound)
    if rs is not None:
        rs = _level(t, f"{RC}.rollout_rs", LEVELS)
        upper = positive_number(t, thresholds[0]) if t.has(thresholds[0]) else \
            positive_number(t, f"{RC}.rollout_is_threshold", 2.0)
        lower = positive_number(t, thresholds[1]) if t.has(thresholds[1]) else (1 / upper if upper else None)
        if rs is None or upper is None or lower is None:
            return None
        if lower > upper:
            t.error(thresholds[1], f"= {lower} is above the upper bound {upper}: no sample would pass; to run this "
                    f"file with the band [1 / upper, upper], use the override ~{thresholds[1]}")
            return None
        corr.filters, corr.filter_source = [mismatch_filter(rs, lower, upper)], f"{RC}.rollout_rs"
    return corr


def _correction_v06(t: Translation) -> _Correction | None:
    """v0.6's flat keys: rollout_is_threshold (null: off) at rollout_is_level; truncate → weight min(rho, threshold)
    when rollout_is; mask → a filter with band [rollout_is_threshold_lower or 1 / threshold, threshold] (and rho itself
    as the weight when rollout_is: the band bounds it already)."""
    keys = ("algorithm.rollout_is", "algorithm.rollout_is_threshold_lower", "algorithm.rollout_is_level",
            "algorithm.rollout_is_mode")
    if not t.has("algorithm.rollout_is_threshold"):
        _unused(t, keys, "algorithm.rollout_is_threshold is null, which switches verl's rollout IS off")
        return None
    bound = positive_number(t, "algorithm.rollout_is_threshold")
    level = _level(t, "algorithm.rollout_is_level", LEVELS, "token")
    mode = _level(t, "algorithm.rollout_is_mode", ("truncate", "mask"), "truncate")
    if bound is None or level is None or mode is None:
        return None
    apply = bool(t.get("algorithm.rollout_is"))
    corr = _Correction(source="algorithm.rollout_is_threshold")
    if mode == "truncate":
        _unused(t, ("algorithm.rollout_is_threshold_lower",), "used only with rollout_is_mode mask")
        if not apply:
            t.warn(corr.source, f"= {bound} not imported: algorithm.rollout_is is false, so verl computes the weights "
                   "for its metrics only (the mismatch is logged here as rollout/logprob_diff_*)")
            return None
        corr.weight = mismatch_weight(level, bound)
        return corr
    lower = positive_number(t, keys[1]) if t.has(keys[1]) else 1 / bound
    if lower is None:
        return None
    if lower > bound:
        t.error(keys[1], f"= {lower} is above rollout_is_threshold {bound}: no sample would pass; to run this file "
                f"with the band [1 / threshold, threshold], use the override ~{keys[1]}")
        return None
    corr.weight = mismatch_weight(level, bound) if apply else None
    corr.filters, corr.filter_source = [mismatch_filter(level, lower, bound)], "algorithm.rollout_is_mode"
    t.warn(corr.filter_source, f"= 'mask' imported as a filter with band [{lower:g}, {bound:g}]: rejected tokens leave "
           "the actor's loss and its token count, as in verl's later v0.6 code; the first releases with "
           "rollout_is_mode zeroed their weights instead (they stayed in the count) and rejected nothing while "
           "algorithm.rollout_is was false")
    return corr


def _tis_cap(t: Translation) -> _Correction | None:
    """v0.5's actor.tis_imp_ratio_cap > 0: verl's vanilla loss times min(exp(old - rollout), cap) per token."""
    path = f"{ARR}.actor.tis_imp_ratio_cap"
    cap = t.get(path)
    if cap is None or (isinstance(cap, int | float) and not isinstance(cap, bool) and cap <= 0):
        return None
    bound = positive_number(t, path)
    if bound is None:
        return None
    if t.native.get("policy_loss", "ppo") != "ppo":
        t.warn(path, f"= {cap!r} not imported: verl applies it in its vanilla (PPO) loss only, not with loss_mode "
               f"{t.get(f'{ARR}.actor.policy_loss.loss_mode')!r}")
        return None
    return _Correction(source=path, weight=mismatch_weight("token", bound))
