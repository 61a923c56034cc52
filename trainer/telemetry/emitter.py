"""EventEmitter: stamps events with run identity and a per-run monotonic seq, fans out to sinks."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from trainer.telemetry import events as ev
from trainer.telemetry.events import Event
from trainer.telemetry.jsonl import JsonlSink

logger = logging.getLogger(__name__)


class Sink(Protocol):
    def write(self, event: Event) -> None: ...
    def close(self) -> None: ...


class EventEmitter:
    """`seq` continues after the largest seq any sink already holds for the run (resume, new attempt)."""

    def __init__(self, run_id: str, attempt: int = 1, sinks: Sequence[Sink] = ()) -> None:
        if not run_id:
            raise ValueError("run_id: must be a non-empty string")
        if attempt < 1:
            raise ValueError(f"attempt: must be >= 1, got {attempt}")
        self.run_id, self.attempt, self.sinks = run_id, attempt, list(sinks)
        self._lock = threading.Lock()
        self.seq = max((s.last_seq(run_id) for s in self.sinks if hasattr(s, "last_seq")), default=0)

    def emit(self, event_type: str, data: Mapping[str, Any], step: int) -> Event:
        with self._lock:
            event = ev.make_event(event_type, run_id=self.run_id, attempt=self.attempt, seq=self.seq + 1,
                                  step=step, data=data)
            self.seq = event.seq
            for sink in self.sinks:
                try:
                    sink.write(event)
                except Exception:  # one broken sink must not stop training or the other sinks
                    logger.exception("telemetry sink %s failed on seq %d", type(sink).__name__, event.seq)
        return event

    def status(self, state: str, step: int, total_steps: int | None = None, eta_s: float | None = None,
               message: str = "") -> Event:
        return self.emit("status", ev.status_data(state, step, total_steps, eta_s, message), step)

    def metrics(self, values: Mapping[str, Any], step: int) -> Event:
        return self.emit("metrics", ev.metrics_data(values), step)

    def rollouts(self, samples: Iterable[Mapping[str, Any]], step: int) -> Event:
        return self.emit("rollouts", ev.rollouts_data(samples), step)

    def checkpoint(self, step: int, path: str, size_bytes: int, contents: Iterable[str]) -> Event:
        return self.emit("checkpoint", ev.checkpoint_data(step, path, size_bytes, contents), step)

    def log(self, level: str, lines: str | Iterable[str], step: int) -> Event:
        return self.emit("log", ev.log_data(level, lines), step)

    def system(self, values: Mapping[str, Any], step: int) -> Event:
        return self.emit("system", ev.system_data(values), step)

    def fingerprint(self, fingerprint: Mapping[str, Any], step: int) -> Event:
        return self.emit("fingerprint", ev.fingerprint_data(fingerprint), step)

    def resume(self, report: Mapping[str, Any], step: int) -> Event:
        return self.emit("resume", ev.resume_data(report), step)

    def stall(self, data: Mapping[str, Any], step: int) -> Event:
        return self.emit("stall", ev.stall_data(data), step)

    def profile(self, data: Mapping[str, Any], step: int) -> Event:
        return self.emit("profile", ev.profile_data(data), step)

    def alert(self, data: Mapping[str, Any], step: int) -> Event:
        return self.emit("alert", ev.alert_data(data), step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> EventEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_emitter(run_dir: str | Path, run_id: str | None = None, attempt: int | None = None,
                 redis_url: str | None = None) -> EventEmitter:
    """Emitter writing `run_dir/events.jsonl` (always) and, with a URL, the run's Redis Stream.

    Identity and sink fall back to POLICYLAB_RUN_ID, POLICYLAB_ATTEMPT, POLICYLAB_EVENTS_REDIS_URL."""
    run_id = run_id or os.environ.get("POLICYLAB_RUN_ID")
    if not run_id:
        raise ValueError("run_id: not given and POLICYLAB_RUN_ID is unset (the trainer passes exp_name)")
    attempt = attempt or int(os.environ.get("POLICYLAB_ATTEMPT", "1"))
    redis_url = redis_url or os.environ.get("POLICYLAB_EVENTS_REDIS_URL")
    jsonl = JsonlSink(Path(run_dir) / "events.jsonl")
    sinks: list[Sink] = [jsonl]  # first: an event is in the file before the Redis sink may need to re-read it
    if redis_url:
        from trainer.telemetry.redis_stream import RedisStreamSink

        sinks.append(RedisStreamSink(redis_url, run_id, backfill_path=jsonl.path))
    return EventEmitter(run_id, attempt, sinks)
