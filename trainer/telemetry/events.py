"""Typed telemetry events (contract 0001, "Telemetry"). Torch-free: the web server imports this.

Every event is one JSON object, identical in `events.jsonl` and in the Redis Stream:

    {"v": 1, "type": "metrics", "run_id": "r-123", "attempt": 1, "seq": 17, "step": 3,
     "time": 1763800000.123, "data": {...}}
"""

from __future__ import annotations

import json
import math
import time as _time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

EVENT_VERSION = 1
EventType = Literal["status", "metrics", "rollouts", "checkpoint", "log", "system", "fingerprint", "resume", "stall",
                    "profile", "alert"]
EVENT_TYPES: tuple[str, ...] = ("status", "metrics", "rollouts", "checkpoint", "log", "system", "fingerprint", "resume",
                                "stall", "profile", "alert")
STALL_STATES: tuple[str, ...] = ("stalled", "recovered")
# a profile file (trainer.roles.profiling): a torch.profiler timeline, or a memory profile (CUDA: a snapshot)
PROFILE_KINDS: tuple[str, ...] = ("timeline", "memory")
PROFILE_FORMATS: tuple[str, ...] = ("chrome_trace_gz", "cuda_memory_snapshot")
# a run-health alert (trainer.pipeline.run.health; docs/decisions/0050-run-health-alerts.md)
ALERT_KINDS: tuple[str, ...] = ("nan", "entropy_collapse", "length_cap", "repetition", "format_collapse",
                                "reward_up_eval_down", "kl_blowup", "grad_spike", "zero_variance", "logprob_mismatch")
RUN_STATES: tuple[str, ...] = ("starting", "running", "succeeded", "failed", "cancelled")
CHECKPOINT_CONTENTS: tuple[str, ...] = ("model", "optimizer", "scheduler", "rng", "data")
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")


class StatusData(TypedDict):
    state: str
    step: int
    total_steps: int | None
    eta_s: float | None
    message: str


class MetricsData(TypedDict):
    values: dict[str, float]


class TurnRecord(TypedDict):
    """One turn of an agentic trajectory: a user turn holds an observation (never trained), a tool turn
    the results of the reply's tool calls (never trained), an assistant turn a reply (trained), with the
    environment's reward for it and its format penalty."""

    role: str  # TURN_ROLES
    text: str
    tokens: int  # tokens this turn adds to the trajectory (0: the final observation, shown only)
    loss: bool  # whether the loss applies to its tokens
    reward: NotRequired[float]  # assistant turns: env reward of this reply
    penalty: NotRequired[float]  # assistant turns: format penalty (<= 0; 0 when the format held)
    format_ok: NotRequired[bool]
    action: NotRequired[str | None]  # the parsed action, None when the format broke
    stop_reason: NotRequired[str]  # how the engine ended this reply: eos / length / stop


class RolloutSample(TypedDict):
    """One rollout. RLVR: a prompt and one response. Agentic: a whole trajectory — `prompt` is the first
    user message, `response` the rest of the conversation (replies and observations), `reward` its score
    (Σ turn rewards + penalties), `stop_reason` = `done_reason`, `group_id` the start state, and the
    per-token arrays align with `tokens` (all response tokens; `token_mask` 1 where the loss applies)."""

    prompt: str
    response: str
    reward: float
    advantage: float
    prompt_length: int
    response_length: int
    stop_reason: str
    group_id: int
    sample_index: int
    tokens: NotRequired[list[str]]
    token_logprobs: NotRequired[list[float]]  # the rollout engine's, as it sampled each token
    token_logprobs_trainer: NotRequired[list[float]]  # actor_train's of the same tokens, before the update
    token_advantages: NotRequired[list[float]]
    token_mask: NotRequired[list[int]]
    env_tag: NotRequired[str]
    success: NotRequired[bool]
    num_turns: NotRequired[int]  # replies
    done_reason: NotRequired[str]  # trainer.envs.base.DONE_REASONS
    turns: NotRequired[list[TurnRecord]]
    render_path: NotRequired[str]  # text frames under render_save_dir


class RolloutsData(TypedDict):
    samples: list[RolloutSample]


class CheckpointData(TypedDict):
    step: int
    path: str
    size_bytes: int
    contents: list[str]


class LogData(TypedDict):
    level: str
    lines: list[str]


class SystemData(TypedDict):
    values: dict[str, float]


class FingerprintData(TypedDict):
    """What an attempt ran on, once per attempt (trainer.telemetry.fingerprint): package versions, the
    PolicyLab commit, the hardware, the resolved config's hash and the training data's hashes."""

    packages: dict[str, str]
    policylab: dict[str, Any]
    hardware: dict[str, Any]
    config_hash: str
    data: dict[str, Any]


class StallData(TypedDict):
    """The driver's watchdog (trainer.pipeline.run.watchdog): a phase past its bound (`stalled`, with the
    ranks not answering and the stacks), or a stalled phase that ended after all (`recovered`)."""

    state: str  # STALL_STATES
    phase: str
    elapsed_s: float
    bound_s: NotRequired[float]
    summary: NotRequired[str]
    on_stall: NotRequired[str]
    waiting: NotRequired[list[dict[str, Any]]]  # {"role", "method", "ranks"}
    stacks: NotRequired[str]
    file: NotRequired[str]  # the stall's text file, relative to the run directory


class ProfileData(TypedDict):
    """One file of the profiler (profiler_timeline / profiler_memory, trainer.roles.profiling) of one compute call
    of the event's step: which role, rank and call, what it holds and where (absolute, inside the run directory)."""

    path: str
    size_bytes: int
    role: str
    rank: int
    call: str  # the role's method: train_step, compute_log_probs, compute_values, generate
    kind: str  # PROFILE_KINDS
    format: str  # PROFILE_FORMATS


class AlertSample(TypedDict):
    group_id: int
    sample_index: int


class AlertData(TypedDict):
    """A run-health check that tripped at the event's step (trainer.pipeline.run.health): which kind, on which
    metric, its value (null when NaN/inf) against which threshold, and the step's samples that tripped it
    (those of a sample check; the inspector shows them by step, group and index)."""

    kind: str  # ALERT_KINDS
    metric: str
    value: float | None
    threshold: float
    message: str
    samples: list[AlertSample]


class ResumeData(TypedDict):
    """What a resumed attempt restored (trainer.pipeline.run.resume_report): `ok` false names, in `problems`,
    what does not add up; the attempt then fails instead of training on."""

    ok: bool
    problems: list[str]
    checkpoint: str | None
    step: int


# Required keys of each event's data, where the contract fixes them (the rest are free-form dicts).
FINGERPRINT_KEYS: tuple[str, ...] = ("packages", "policylab", "hardware", "config_hash", "data")
RESUME_KEYS: tuple[str, ...] = ("ok", "problems", "checkpoint", "step")
STALL_KEYS: tuple[str, ...] = ("state", "phase", "elapsed_s")
ALERT_KEYS: tuple[str, ...] = ("kind", "metric", "value", "threshold", "message", "samples")
PROFILE_KEYS: tuple[str, ...] = ("path", "size_bytes", "role", "rank", "call", "kind", "format")


# Required keys of a RolloutSample (spelled out: with postponed annotations TypedDict cannot see NotRequired).
ROLLOUT_SAMPLE_KEYS: tuple[str, ...] = ("prompt", "response", "reward", "advantage", "prompt_length",
                                        "response_length", "stop_reason", "group_id", "sample_index")
TURN_KEYS: tuple[str, ...] = ("role", "text", "tokens", "loss")
TURN_ROLES: tuple[str, ...] = ("user", "assistant", "tool")


@dataclass(frozen=True)
class Event:
    type: str
    run_id: str
    attempt: int
    seq: int
    step: int
    time: float
    data: dict[str, Any] = field(default_factory=dict)
    v: int = EVENT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The event as a plain dict (shallow: `data` is the event's own, not a copy)."""
        return {"v": self.v, "type": self.type, "run_id": self.run_id, "attempt": self.attempt, "seq": self.seq,
                "step": self.step, "time": self.time, "data": self.data}

    def to_json(self) -> str:
        """Compact JSON on one line; NaN/inf become null so every consumer (JS included) can parse it."""
        # the common case has no NaN/inf: encode directly, and walk the data only when json refuses it
        # (a rollouts event of 128 samples: 1.1 ms instead of 5.5 ms, on the trainer's critical path)
        try:
            text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except ValueError:
            text = json.dumps(_finite(self.to_dict()), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return escape_line_breaks(text)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        d = parse_event(d)
        return cls(type=d["type"], run_id=d["run_id"], attempt=int(d["attempt"]), seq=int(d["seq"]),
                   step=int(d["step"]), time=float(d["time"]), data=dict(d["data"]), v=int(d.get("v", 1)))

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        return cls.from_dict(json.loads(text))


# What str.splitlines() (and other line readers) break at that json.dumps(ensure_ascii=False) leaves raw: every
# other one (\n, \r, \v, \f, \x1c-\x1e) is a control character, which JSON always escapes.
_RAW_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def escape_line_breaks(text: str) -> str:
    """JSON text with U+0085, U+2028 and U+2029 written as escapes (the same string to a JSON parser): a
    record of model text stays one line for `str.splitlines()`, a common way to read JSONL. They can only
    stand inside JSON strings, so replacing them never changes what the text means."""
    for char, escape in _RAW_LINE_BREAKS.items():
        if char in text:
            text = text.replace(char, escape)
    return text


class EventError(ValueError):
    """A telemetry event that does not follow the contract; the message names the field."""


REQUIRED_FIELDS: dict[str, type | tuple[type, ...]] = {
    "type": str, "run_id": (str, int), "attempt": int, "seq": int, "step": int, "time": (int, float), "data": dict,
}


def parse_event(raw: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """Decode and check one event against the contract (v1): the one parser of producers and ingest."""
    if isinstance(raw, str | bytes):
        try:
            event = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise EventError(f"event is not valid JSON: {exc}") from exc
    else:
        event = dict(raw)
    if not isinstance(event, dict):
        raise EventError(f"event must be a JSON object, got {type(event).__name__}")
    for name, kind in REQUIRED_FIELDS.items():
        if name not in event:
            raise EventError(f"event field {name!r} is missing (required: {', '.join(REQUIRED_FIELDS)})")
        if not isinstance(event[name], kind) or isinstance(event[name], bool):
            raise EventError(f"event field {name!r} has type {type(event[name]).__name__}; expected {kind}")
    if event["type"] not in EVENT_TYPES:
        raise EventError(f"event field 'type' is {event['type']!r}; valid types: {', '.join(EVENT_TYPES)}")
    return event


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _floats(values: Mapping[str, Any], what: str) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise ValueError(f"{what}: key {key!r} must be a string")
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{what}[{key!r}]: {value!r} is not a number") from None
    return out


def status_data(state: str, step: int, total_steps: int | None = None, eta_s: float | None = None,
                message: str = "") -> StatusData:
    if state not in RUN_STATES:
        raise ValueError(f"status.state: {state!r}; valid: {', '.join(RUN_STATES)}")
    return {"state": state, "step": int(step), "total_steps": total_steps, "eta_s": eta_s, "message": message}


def metrics_data(values: Mapping[str, Any]) -> MetricsData:
    return {"values": _floats(values, "metrics.values")}


def system_data(values: Mapping[str, Any]) -> SystemData:
    return {"values": _floats(values, "system.values")}


def rollouts_data(samples: Iterable[Mapping[str, Any]]) -> RolloutsData:
    out = []
    for i, sample in enumerate(samples):
        missing = [k for k in ROLLOUT_SAMPLE_KEYS if k not in sample]
        if missing:
            raise ValueError(f"rollouts.samples[{i}]: missing {', '.join(sorted(missing))}")
        for j, turn in enumerate(sample.get("turns") or []):
            lacking = [k for k in TURN_KEYS if k not in turn]
            if lacking or turn["role"] not in TURN_ROLES:
                raise ValueError(f"rollouts.samples[{i}].turns[{j}]: needs {', '.join(TURN_KEYS)} with role one of "
                                 f"{', '.join(TURN_ROLES)}; got keys {sorted(turn)}")
        out.append(dict(sample))
    return {"samples": out}  # type: ignore[typeddict-item]


def checkpoint_data(step: int, path: str, size_bytes: int, contents: Iterable[str]) -> CheckpointData:
    contents = list(contents)
    unknown = [c for c in contents if c not in CHECKPOINT_CONTENTS]
    if unknown:
        raise ValueError(f"checkpoint.contents: unknown {unknown}; valid: {', '.join(CHECKPOINT_CONTENTS)}")
    return {"step": int(step), "path": str(path), "size_bytes": int(size_bytes), "contents": contents}


def log_data(level: str, lines: str | Iterable[str]) -> LogData:
    if level not in LOG_LEVELS:
        raise ValueError(f"log.level: {level!r}; valid: {', '.join(LOG_LEVELS)}")
    return {"level": level, "lines": lines.splitlines() if isinstance(lines, str) else list(lines)}


def fingerprint_data(fingerprint: Mapping[str, Any]) -> FingerprintData:
    missing = [k for k in FINGERPRINT_KEYS if k not in fingerprint]
    if missing:
        raise ValueError(f"fingerprint: missing {', '.join(missing)}")
    return dict(fingerprint)  # type: ignore[return-value]


def resume_data(report: Mapping[str, Any]) -> ResumeData:
    missing = [k for k in RESUME_KEYS if k not in report]
    if missing:
        raise ValueError(f"resume: missing {', '.join(missing)}")
    if bool(report["ok"]) == bool(report["problems"]):
        raise ValueError("resume: ok must be true exactly when problems is empty")
    return dict(report)  # type: ignore[return-value]


def stall_data(data: Mapping[str, Any]) -> StallData:
    missing = [k for k in STALL_KEYS if k not in data]
    if missing:
        raise ValueError(f"stall: missing {', '.join(missing)}")
    if data["state"] not in STALL_STATES:
        raise ValueError(f"stall: state {data['state']!r}; valid: {', '.join(STALL_STATES)}")
    return dict(data)  # type: ignore[return-value]


def alert_data(data: Mapping[str, Any]) -> AlertData:
    missing = [k for k in ALERT_KEYS if k not in data]
    if missing:
        raise ValueError(f"alert: missing {', '.join(missing)}")
    if data["kind"] not in ALERT_KINDS:
        raise ValueError(f"alert: kind {data['kind']!r}; valid: {', '.join(ALERT_KINDS)}")
    bad = [s for s in data["samples"] if not isinstance(s, Mapping) or {"group_id", "sample_index"} - set(s)]
    if bad:
        raise ValueError(f"alert: samples need group_id and sample_index; got {bad[0]!r}")
    return {k: data[k] for k in ALERT_KEYS}  # type: ignore[return-value]


def profile_data(data: Mapping[str, Any]) -> ProfileData:
    missing = [k for k in PROFILE_KEYS if k not in data]
    if missing:
        raise ValueError(f"profile: missing {', '.join(missing)}")
    if data["kind"] not in PROFILE_KINDS or data["format"] not in PROFILE_FORMATS:
        raise ValueError(f"profile: kind {data['kind']!r} / format {data['format']!r}; valid: "
                         f"{', '.join(PROFILE_KINDS)} / {', '.join(PROFILE_FORMATS)}")
    return {k: data[k] for k in PROFILE_KEYS}  # type: ignore[return-value]


def make_event(type: str, *, run_id: str, attempt: int, seq: int, step: int, data: Mapping[str, Any],
               time: float | None = None) -> Event:
    """An Event with a validated type; `time` defaults to now (unix seconds)."""
    if type not in EVENT_TYPES:
        raise ValueError(f"event.type: {type!r}; valid: {', '.join(EVENT_TYPES)}")
    if not run_id:
        raise ValueError("event.run_id: must be a non-empty string")
    return Event(type=type, run_id=run_id, attempt=int(attempt), seq=int(seq), step=int(step),
                 time=_time.time() if time is None else float(time), data=dict(data))
