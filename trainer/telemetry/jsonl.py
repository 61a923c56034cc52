"""Append-only `events.jsonl`: the source of truth that survives any outage (torch-free)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.telemetry.events import Event

logger = logging.getLogger(__name__)


def iter_events(path: str | Path, after_seq: int = 0) -> Iterator[dict[str, Any]]:
    """Events of a JSONL file in file order, those with seq > after_seq; a torn last line is skipped."""
    path = Path(path)
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                logger.warning("%s:%d: skipping a line that is not complete JSON (torn write?)", path, lineno)
                continue
            if event.get("seq", 0) > after_seq:
                yield event


def read_events(path: str | Path, after_seq: int = 0) -> list[dict[str, Any]]:
    """All events of a JSONL file with seq > after_seq (for backfill into the platform)."""
    return list(iter_events(path, after_seq))


class JsonlSink:
    """Appends one JSON line per event; flushes every `flush_every` events, fsyncs on close."""

    def __init__(self, path: str | Path, flush_every: int = 1) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_every = max(1, flush_every)
        self._unflushed = 0
        torn_tail = self.path.exists() and self.path.stat().st_size > 0 and not self._ends_with_newline()
        self._file = self.path.open("a", encoding="utf-8")
        if torn_tail:  # keep the next event on its own line after a crash mid-write
            self._file.write("\n")

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def last_seq(self, run_id: str) -> int:
        """Largest seq of `run_id` already in the file (0 if none)."""
        return max((e.get("seq", 0) for e in iter_events(self.path) if e.get("run_id") == run_id), default=0)

    def write(self, event: Event) -> None:
        self._file.write(event.to_json() + "\n")
        self._unflushed += 1
        if self._unflushed >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        self._file.flush()
        self._unflushed = 0

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
