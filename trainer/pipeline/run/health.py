"""Run health: the failure signs RL users look for by hand in a run's curves, checked on every step.

Each check is a small pure function of the step's metrics (the dict the loop logs) or of its samples, with
its rule in the docstring; `HealthMonitor` keeps the little state some need (the first step's length clip
ratio, recent gradient norms, the previous evaluation, when each alert last tripped; saved with each checkpoint
through `state_dict`) and turns trips into alerts, which the loop emits as `alert` events (trainer.telemetry.events.AlertData). Thresholds: the config's `health` section; defaults and
where they come from: docs/decisions/0050-run-health-alerts.md.

An alert fires when its condition trips after at least `rearm_steps` checked steps without a trip of the same
(kind, metric): one alert per episode, not one per step, and a value hovering at its bound does not fire on every
other step (`rearm_due`).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from trainer.config.schema import HealthConfig

ENTROPY = "actor/entropy"
LENGTH_CLIP = "response_length/clip_ratio"
FORMAT_ERRORS = "env/format_error_rate"  # agentic: replies whose action did not parse
REWARD = "reward/mean"
EVAL_REWARD = "eval/reward/mean"
PPO_KL = "actor/ppo_kl"
CLIPFRAC = "actor/clipfrac"
GRAD_NORM = "actor/grad_norm"
ZERO_VARIANCE = "rollout/zero_variance_group_fraction"
LOGPROB_DIFF = "rollout/logprob_diff_mean"
REPETITION = "response/repeated_ngram_share"  # not a logged metric: the share of the step's samples flagged
MAX_LINKED_SAMPLES = 20  # sample ids an alert carries for the inspector


class SampleFacts(NamedTuple):
    """What the sample checks read of one generated response; (step, group_id, sample_index) names it in
    the inspector."""

    group_id: int
    sample_index: int
    stop_reason: str
    token_ids: Sequence[int]


@dataclass(frozen=True)
class Alert:
    kind: str  # trainer.telemetry.events.ALERT_KINDS
    metric: str
    value: float | None  # None: the value was NaN / inf
    threshold: float
    message: str
    samples: tuple[tuple[int, int], ...] = ()  # (group_id, sample_index) of the samples that tripped it

    def data(self) -> dict[str, Any]:
        """The `alert` event's data (trainer.telemetry.events.AlertData)."""
        return {"kind": self.kind, "metric": self.metric, "value": self.value, "threshold": self.threshold,
                "message": self.message,
                "samples": [{"group_id": g, "sample_index": i} for g, i in self.samples[:MAX_LINKED_SAMPLES]]}


# -- the checks: pure functions -----------------------------------------------------------------------------

def non_finite_metrics(metrics: Mapping[str, float]) -> list[str]:
    """Keys whose value is NaN or ±inf (a loss or gradient that overflowed poisons every later step)."""
    return sorted(key for key, value in metrics.items() if not math.isfinite(value))


def entropy_collapsed(entropy: float, minimum: float) -> bool:
    """H < minimum: the mean token entropy (nats) is near 0, the policy samples one path and stops exploring
    (Cui et al. 2025: performance saturates once entropy is spent, R = -a·e^H + b)."""
    return entropy < minimum


def length_running_to_cap(clip_ratio: float, first_clip_ratio: float, maximum: float, rise: float) -> bool:
    """clip_ratio ≥ maximum and clip_ratio − first_clip_ratio ≥ rise: most responses now end at the length
    cap and the run moved there (a task whose answers fill the cap from step 1 does not trip it)."""
    return risen_to(clip_ratio, first_clip_ratio, maximum, rise)


def risen_to(share: float, first: float, maximum: float, rise: float) -> bool:
    """share ≥ maximum and share − first ≥ rise: a share that the run moved up to its bound (the length clip
    ratio, the agentic format error rate), not one it started at."""
    return share >= maximum and share - first >= rise


def repeated_ngram_share(token_ids: Sequence[int], n: int) -> float:
    """1 − distinct n-grams / n-grams of one response: 0 when no n-gram repeats, → 1 for a loop of one
    n-gram; 0 for a response of fewer than 2n tokens (too short to tell a loop)."""
    if len(token_ids) < 2 * n:
        return 0.0
    grams = [tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams)


def repetitive_samples(samples: Sequence[SampleFacts], n: int, maximum: float) -> list[SampleFacts]:
    """The samples whose repeated n-gram share (repeated_ngram_share) is ≥ maximum."""
    return [s for s in samples if repeated_ngram_share(s.token_ids, n) >= maximum]


def reward_up_eval_down(reward_before: float, reward_now: float, eval_before: float, eval_now: float,
                        margin: float) -> bool:
    """Between two evaluations: the training reward rose by ≥ margin while the evaluation reward fell by
    ≥ margin — the policy learned to please the reward on its training prompts, not to solve the task."""
    return reward_now - reward_before >= margin and eval_before - eval_now >= margin


def above(value: float, maximum: float) -> bool:
    """value > maximum (KL, clip fraction, log-prob mismatch: the update or the engine left the bound)."""
    return value > maximum


def at_least(value: float, maximum: float) -> bool:
    """value ≥ maximum (a share that reached its bound)."""
    return value >= maximum


def nothing_to_learn(shares: Sequence[float], maximum: float, steps: int) -> bool:
    """The last `steps` zero-variance shares (groups whose samples all got one reward) are all ≥ maximum:
    GRPO's advantages are 0 for nearly every sample, step after step (one such step of a few groups is chance)."""
    return len(shares) >= steps and all(share >= maximum for share in shares[-steps:])


def rearm_due(last_trip: int | None, now: int, rearm_steps: int) -> bool:
    """An alert fires at check `now` when its condition never tripped before, or when the checks strictly between
    its last trip and now (all clear) number at least rearm_steps."""
    return last_trip is None or now - last_trip - 1 >= rearm_steps


def grad_norm_spike_bound(recent: Sequence[float], factor: float, min_steps: int) -> float | None:
    """factor × median(recent gradient norms): the bound a step's norm must not pass; None until `recent`
    holds min_steps norms (the median of a few start-up steps says little)."""
    if len(recent) < min_steps:
        return None
    return factor * statistics.median(recent)


# -- the monitor --------------------------------------------------------------------------------------------

@dataclass
class HealthMonitor:
    """Checks each step (`check`) and keeps what the checks compare against."""

    cfg: HealthConfig
    first_clip_ratio: float | None = None
    first_format_errors: float | None = None
    grad_norms: deque[float] = field(default_factory=deque)
    zero_variance: list[float] = field(default_factory=list)  # the last zero_variance_steps shares
    last_eval: tuple[float, float] | None = None  # (training reward, eval reward) at the previous evaluation
    checks: int = 0  # steps checked so far
    last_trip: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, metric) -> check it last tripped

    def on(self, kind: str) -> bool:
        return self.cfg.enabled and kind not in self.cfg.disabled

    def state_dict(self) -> dict[str, Any]:
        """What the checks compare against and which alerts are armed, as JSON for the checkpoint's
        trainer_state.json: a resumed run neither raises again an episode it already raised nor forgets the first
        step's shares, the gradient-norm window, the zero-variance run or the previous evaluation."""
        return {"first_clip_ratio": self.first_clip_ratio, "first_format_errors": self.first_format_errors,
                "grad_norms": list(self.grad_norms), "zero_variance": list(self.zero_variance),
                "last_eval": list(self.last_eval) if self.last_eval is not None else None, "checks": self.checks,
                "last_trip": [[kind, metric, check] for (kind, metric), check in sorted(self.last_trip.items())]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore state_dict()'s output (the config's thresholds and windows stay this run's own)."""
        self.first_clip_ratio = state["first_clip_ratio"]
        self.first_format_errors = state["first_format_errors"]
        self.grad_norms = deque(float(x) for x in state["grad_norms"][-self.cfg.grad_norm_window:])
        self.zero_variance = [float(x) for x in state["zero_variance"]][-self.cfg.zero_variance_steps:]
        last_eval = state["last_eval"]
        self.last_eval = (float(last_eval[0]), float(last_eval[1])) if last_eval is not None else None
        self.checks = int(state["checks"])
        self.last_trip = {(str(kind), str(metric)): int(check) for kind, metric, check in state["last_trip"]}

    def check(self, step: int, metrics: Mapping[str, float], samples: Sequence[SampleFacts] = ()) -> list[Alert]:
        """The alerts of one step: its trips (`trips`) whose (kind, metric) is due again (`rearm_due`)."""
        trips = self.trips(step, metrics, samples) if self.cfg.enabled else []
        self.checks += 1
        fresh = [a for a in trips if rearm_due(self.last_trip.get((a.kind, a.metric)), self.checks, self.cfg.rearm_steps)]
        self.last_trip.update({(a.kind, a.metric): self.checks for a in trips})
        return fresh

    def trips(self, step: int, metrics: Mapping[str, float], samples: Sequence[SampleFacts]) -> list[Alert]:
        cfg, out = self.cfg, []

        def value(key: str) -> float | None:
            number = metrics.get(key)
            return float(number) if number is not None and math.isfinite(number) else None

        if self.on("nan"):
            out += [Alert("nan", key, None, 0.0, f"{key} is {metrics[key]} at step {step}")
                    for key in non_finite_metrics(metrics)]
        if self.on("entropy_collapse") and (h := value(ENTROPY)) is not None and entropy_collapsed(h, cfg.entropy_min):
            out.append(Alert("entropy_collapse", ENTROPY, h, cfg.entropy_min,
                             f"token entropy {h:.4g} < {cfg.entropy_min:g}: the policy stopped exploring"))
        if (clip := value(LENGTH_CLIP)) is not None:
            self.first_clip_ratio = clip if self.first_clip_ratio is None else self.first_clip_ratio
            if self.on("length_cap") and length_running_to_cap(clip, self.first_clip_ratio, cfg.length_clip_ratio_max,
                                                               cfg.length_clip_ratio_rise):
                capped = tuple((s.group_id, s.sample_index) for s in samples if s.stop_reason == "length")
                out.append(Alert("length_cap", LENGTH_CLIP, clip, cfg.length_clip_ratio_max,
                                 f"{clip:.0%} of responses end at the length cap (from {self.first_clip_ratio:.0%} "
                                 "at the first step)", capped))
        if (errors := value(FORMAT_ERRORS)) is not None:
            self.first_format_errors = errors if self.first_format_errors is None else self.first_format_errors
            if self.on("format_collapse") and risen_to(errors, self.first_format_errors, cfg.format_error_max,
                                                       cfg.format_error_rise):
                out.append(Alert("format_collapse", FORMAT_ERRORS, errors, cfg.format_error_max,
                                 f"{errors:.0%} of replies broke the action format (from {self.first_format_errors:.0%} "
                                 "at the first step)"))
        if self.on("repetition") and samples:
            loops = repetitive_samples(samples, cfg.repetition_ngram, cfg.repetition_max)
            looping = len(loops) / len(samples)
            if loops and at_least(looping, cfg.repetition_share_max):
                out.append(Alert("repetition", REPETITION, looping, cfg.repetition_share_max,
                                 f"{len(loops)} of {len(samples)} responses repeat ≥ {cfg.repetition_max:.0%} of "
                                 f"their {cfg.repetition_ngram}-grams", tuple((s.group_id, s.sample_index) for s in loops)))
        reward, evaluation = value(REWARD), value(EVAL_REWARD)
        if reward is not None and evaluation is not None:
            if self.on("reward_up_eval_down") and self.last_eval is not None and reward_up_eval_down(
                    self.last_eval[0], reward, self.last_eval[1], evaluation, cfg.eval_divergence):
                out.append(Alert("reward_up_eval_down", EVAL_REWARD, evaluation, cfg.eval_divergence,
                                 f"training reward {self.last_eval[0]:.3g} → {reward:.3g} while eval reward "
                                 f"{self.last_eval[1]:.3g} → {evaluation:.3g}"))
            self.last_eval = (reward, evaluation)
        for kind, key, limit, what in (("kl_blowup", PPO_KL, cfg.ppo_kl_max, "KL(π_old‖π) of the update"),
                                       ("kl_blowup", CLIPFRAC, cfg.clipfrac_max, "share of clipped token ratios"),
                                       ("logprob_mismatch", LOGPROB_DIFF, cfg.logprob_diff_max,
                                        "mean |engine − trainer| token log-prob")):
            if self.on(kind) and (number := value(key)) is not None and above(number, limit):
                out.append(Alert(kind, key, number, limit, f"{what} {number:.4g} > {limit:g}"))
        if (share := value(ZERO_VARIANCE)) is not None:
            self.zero_variance = [*self.zero_variance, share][-cfg.zero_variance_steps:]
            if self.on("zero_variance") and nothing_to_learn(self.zero_variance, cfg.zero_variance_max,
                                                             cfg.zero_variance_steps):
                out.append(Alert("zero_variance", ZERO_VARIANCE, share, cfg.zero_variance_max,
                                 f"≥ {cfg.zero_variance_max:.0%} of groups had one reward for all their samples on "
                                 f"{cfg.zero_variance_steps} steps running: no signal left to learn from"))
        if (norm := value(GRAD_NORM)) is not None:
            bound = grad_norm_spike_bound(self.grad_norms, cfg.grad_norm_factor, cfg.grad_norm_min_steps)
            if self.on("grad_spike") and bound is not None and above(norm, bound):
                out.append(Alert("grad_spike", GRAD_NORM, norm, bound,
                                 f"gradient norm {norm:.4g} > {cfg.grad_norm_factor:g} × the median of the last "
                                 f"{len(self.grad_norms)} steps ({bound / cfg.grad_norm_factor:.4g})"))
            self.grad_norms.append(norm)
            while len(self.grad_norms) > cfg.grad_norm_window:
                self.grad_norms.popleft()
        return out
