"""Run supervision: the watchdog's stall bounds and the health monitor's alerts."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from trainer.config.sections.base import Section, fld, fld_factory
from trainer.telemetry.events import ALERT_KINDS

WATCHED_PHASES = ("generate", "reward", "old_log_probs", "ref_log_probs", "values", "advantages", "critic_update",
                  "actor_update", "weight_sync", "eval", "checkpoint")


class WatchdogConfig(Section):
    """PolicyLab's own: when a step's phase counts as stalled, and what then (trainer.pipeline.run.watchdog)."""

    factor: float = fld(10.0, category="Run supervision", gt=1,
                        description="A phase is stalled past factor × the median of its last durations.")
    floor_s: float = fld(60.0, category="Run supervision", gt=0,
                         description="The smallest learned bound, in seconds (short phases vary a lot).")
    first_s: float = fld(1800.0, category="Run supervision", gt=0,
                         description="The bound of a phase before it has run min_samples times (start-up "
                         "compiles, loads and warms up).")
    window: int = fld(20, category="Run supervision", ge=1, description="Durations the median is taken over.")
    min_samples: int = fld(3, category="Run supervision", ge=1,
                           description="Runs of a phase before its bound is learned from them.")
    phase_timeout_s: dict[str, float] = fld_factory(
        dict, category="Run supervision",
        description=f"A fixed bound in seconds per phase, instead of the learned one; phases: {', '.join(WATCHED_PHASES)}.",
    )
    on_stall: Literal["wait", "fail", "restart_from_checkpoint"] = fld(
        "wait", category="Run supervision",
        description="wait: report the stall (phase, ranks, stacks) and keep waiting; fail: end the attempt, no "
        "retry; restart_from_checkpoint: end it, and the platform resumes the run from its latest checkpoint.",
    )
    poll_s: float = fld(1.0, category="Run supervision", gt=0, le=60, description="How often the watchdog looks.")
    grace_s: float = fld(30.0, category="Run supervision", gt=0,
                         description="After fail / restart, how long the driver may take to stop before it exits.")

    @field_validator("phase_timeout_s")
    @classmethod
    def _known_phases(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(WATCHED_PHASES))
        if unknown:
            raise ValueError(f"unknown phase(s) {unknown}; valid: {', '.join(WATCHED_PHASES)}")
        bad = sorted(name for name, seconds in value.items() if not seconds > 0)
        if bad:
            raise ValueError(f"bounds must be > 0 seconds: {bad}")
        return value


class HealthConfig(Section):
    """PolicyLab's own: the run-health alerts checked on every step (trainer.pipeline.run.health; the defaults'
    sources: docs/decisions/0050-run-health-alerts.md)."""

    enabled: bool = fld(True, category="Run supervision", description="Check every step for the signs of a "
                        "failing run and emit an `alert` event when one trips.")
    disabled: list[str] = fld_factory(
        list, category="Run supervision",
        description=f"Alert kinds switched off; kinds: {', '.join(ALERT_KINDS)}.",
    )
    rearm_steps: int = fld(10, category="Run supervision", ge=1,
                           description="An alert fires again only after this many steps without its condition "
                           "(one alert per episode; 1: again at the first trip after a clear step).")
    entropy_min: float = fld(0.05, category="Run supervision", ge=0,
                             description="entropy_collapse: the mean token entropy (nats) below this.")
    length_clip_ratio_max: float = fld(0.5, category="Run supervision", ge=0, le=1,
                                       description="length_cap: the share of responses cut at the length cap at "
                                       "or above this ...")
    length_clip_ratio_rise: float = fld(0.25, category="Run supervision", ge=0, le=1,
                                        description="... and this much above the first step's share.")
    repetition_ngram: int = fld(4, category="Run supervision", ge=1,
                                description="repetition: the n of the token n-grams counted.")
    repetition_max: float = fld(0.5, category="Run supervision", gt=0, le=1,
                                description="repetition: a response repeats when this share of its n-grams are "
                                "repeats ...")
    repetition_share_max: float = fld(0.25, category="Run supervision", gt=0, le=1,
                                      description="... and the alert trips when this share of the step's "
                                      "responses repeat.")
    format_error_max: float = fld(0.5, category="Run supervision", ge=0, le=1,
                                  description="format_collapse (agentic): env/format_error_rate, the share of replies "
                                  "whose action did not parse, at or above this ...")
    format_error_rise: float = fld(0.25, category="Run supervision", ge=0, le=1,
                                   description="... and this much above the first step's rate.")
    eval_divergence: float = fld(0.05, category="Run supervision", gt=0,
                                 description="reward_up_eval_down: between two evaluations the training reward "
                                 "rose and the eval reward fell, each by at least this.")
    ppo_kl_max: float = fld(0.1, category="Run supervision", gt=0,
                            description="kl_blowup: actor/ppo_kl above this.")
    clipfrac_max: float = fld(0.3, category="Run supervision", gt=0, le=1,
                              description="kl_blowup: actor/clipfrac (share of clipped token ratios) above this.")
    grad_norm_factor: float = fld(10.0, category="Run supervision", gt=1,
                                  description="grad_spike: actor/grad_norm above this × the median of the last "
                                  "grad_norm_window steps.")
    grad_norm_window: int = fld(20, category="Run supervision", ge=1,
                                description="grad_spike: steps the median is taken over.")
    grad_norm_min_steps: int = fld(5, category="Run supervision", ge=1,
                                   description="grad_spike: steps seen before the check starts.")
    zero_variance_max: float = fld(0.9, category="Run supervision", gt=0, le=1,
                                   description="zero_variance: the share of groups whose samples all got one "
                                   "reward at or above this ...")
    zero_variance_steps: int = fld(3, category="Run supervision", ge=1,
                                   description="... on this many steps running (nothing left to learn).")
    logprob_diff_max: float = fld(0.1, category="Run supervision", gt=0,
                                  description="logprob_mismatch: rollout/logprob_diff_mean (engine vs trainer "
                                  "token log-probs) above this.")

    @field_validator("disabled")
    @classmethod
    def _known_kinds(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(ALERT_KINDS))
        if unknown:
            raise ValueError(f"unknown alert kind(s) {unknown}; valid: {', '.join(ALERT_KINDS)}")
        return value
