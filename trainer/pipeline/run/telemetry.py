"""The run's telemetry: events (events.jsonl + optional Redis Stream), the `track_with` tracker and
system samples, behind the few calls the pipeline makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.telemetry.emitter import EventEmitter
from trainer.telemetry.emitter import open_emitter as open_event_emitter
from trainer.telemetry.system import SystemSampler
from trainer.telemetry.trackers import NullTracker, build_tracker

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


class RunTelemetry:
    def __init__(self, emitter: EventEmitter, tracker: Any = None) -> None:
        self.emitter = emitter
        self.tracker = tracker or NullTracker()
        self.system_sampler = SystemSampler()
        self.step = 0

    def status(self, state: str, step: int, total_steps: int | None = None, eta_s: float | None = None,
               message: str = "") -> None:
        self.step = step
        self.emitter.status(state, step, total_steps, eta_s, message)

    def metrics(self, values: Mapping[str, float], step: int) -> None:
        self.step = step
        self.emitter.metrics(values, step)
        self.tracker.log(values, step)
        self.emitter.system(self.system_sampler.sample(), step)

    def rollouts(self, samples: Iterable[Mapping[str, Any]], step: int) -> None:
        self.emitter.rollouts(samples, step)

    def checkpoint(self, step: int, path: str, size_bytes: int, contents: Iterable[str]) -> None:
        self.emitter.checkpoint(step, path, size_bytes, contents)

    def fingerprint(self, fingerprint: Mapping[str, Any], step: int) -> None:
        self.emitter.fingerprint(fingerprint, step)

    def resume(self, report: Mapping[str, Any], step: int) -> None:
        self.emitter.resume(report, step)

    def stall(self, data: Mapping[str, Any]) -> None:
        self.emitter.stall(data, self.step)

    def profile(self, data: Mapping[str, Any], step: int) -> None:
        self.emitter.profile(data, step)

    def alert(self, data: Mapping[str, Any], step: int) -> None:
        self.emitter.alert(data, step)

    @property
    def attempt(self) -> int:
        return self.emitter.attempt

    def log(self, level: str, lines: str | Iterable[str]) -> None:
        self.emitter.log(level, lines, self.step)

    def close(self) -> None:
        try:
            self.tracker.close()
        finally:
            self.emitter.close()


def open_emitter(cfg: PipelineConfig, identity: Any) -> RunTelemetry:
    """Events into ``output_dir/events.jsonl`` (+ Redis when configured) and the config's tracker."""
    emitter = open_event_emitter(cfg.output_dir, identity.run_id, identity.attempt, identity.events_redis)
    # tensorboard writes to logging_dir unless tracker_kwargs names its own log_dir
    kwargs = {"log_dir": cfg.logging_dir, **cfg.tracker_kwargs} if cfg.track_with == "tensorboard" else cfg.tracker_kwargs
    try:
        tracker = build_tracker(cfg.track_with, cfg.output_dir, run_name=identity.run_id,
                                config=tracker_config(cfg), **kwargs)
    except Exception:
        emitter.close()
        raise
    return RunTelemetry(emitter, tracker)


def tracker_config(cfg: PipelineConfig) -> dict[str, Any]:
    """The resolved config a tracker uploads (wandb, swanlab), each reward's judge_api_key blanked: a key
    resolved from ${oc.env:…} must not leave the trainer."""
    data = cfg.model_dump(mode="json")
    for section in (data.get("rewards") or {}).values():
        if section.get("judge_api_key"):
            section["judge_api_key"] = "<redacted>"
    return data


def open_emitter_at(output_dir: str | Path | None, run_id: str, attempt: int, redis_url: str | None) -> RunTelemetry:
    """Events only (no tracker), for reporting a run that failed before its config was valid."""
    if output_dir is None:
        from trainer.telemetry.redis_stream import RedisStreamSink

        if redis_url is None:
            raise ValueError("nowhere to report the run: neither an output_dir nor a redis_url")
        return RunTelemetry(EventEmitter(run_id, attempt, [RedisStreamSink(redis_url, run_id)]))
    return RunTelemetry(open_event_emitter(output_dir, run_id, attempt, redis_url))
