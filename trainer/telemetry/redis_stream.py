"""Redis Stream sink: XADD each event to `policylab:run:<run_id>:events` (field `event`), never blocking.

`write` only appends to an in-memory queue; a daemon thread delivers it. While Redis is down or
restarting the queue holds the events and the thread retries with backoff; on reconnect it replays
everything not acknowledged, in order. Each event is added with the explicit stream id `<seq>-1`, so
a retry of an event that did land is refused by Redis as "equal or smaller" and counted as delivered:
every event arrives exactly once, in seq order. The queue is bounded (`max_pending`): past it the
oldest undelivered events leave memory with a warning. With `backfill_path` (the run's
`events.jsonl`, written before this sink sees an event) they are re-read from the file and sent in
order once Redis is back, so nothing is lost; without it they stay only in the JSONL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from trainer.telemetry.events import Event
from trainer.telemetry.jsonl import iter_events

logger = logging.getLogger(__name__)


def stream_key(run_id: str) -> str:
    return f"policylab:run:{run_id}:events"


def stream_id(seq: int) -> str:
    """Stream entry id of an event: ordered by seq, and a repeated XADD of the same event is refused."""
    return f"{seq}-1"


class RedisStreamSink:
    def __init__(self, url: str, run_id: str, *, backfill_path: str | Path | None = None,
                 max_pending: int = 100_000, batch_size: int = 256, max_backoff_s: float = 2.0,
                 socket_timeout_s: float = 2.0) -> None:
        import redis

        self.key, self.run_id = stream_key(run_id), run_id
        self.backfill_path = Path(backfill_path) if backfill_path is not None else None
        self._gaps: list[list[int]] = []  # [first, last] seq ranges dropped from memory, to re-read
        self.max_pending, self.batch_size, self.max_backoff_s = max_pending, batch_size, max_backoff_s
        self._redis = redis.Redis.from_url(url, socket_timeout=socket_timeout_s,
                                           socket_connect_timeout=socket_timeout_s,
                                           retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
        self._errors: tuple[type[BaseException], ...] = (redis.ConnectionError, redis.TimeoutError,
                                                          redis.BusyLoadingError, OSError)
        self._pending: deque[Event] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._connected = True
        self.delivered = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._deliver_loop, name=f"redis-sink-{run_id}", daemon=True)
        self._thread.start()

    def last_seq(self, run_id: str) -> int:
        """Largest seq already in the run's stream (0 if none or Redis is unreachable)."""
        try:
            last = self._redis.xrevrange(stream_key(run_id), count=1)
        except self._errors:
            return 0
        return int(last[0][0].split(b"-")[0]) if last else 0

    def write(self, event: Event) -> None:
        with self._cond:
            self._pending.append(event)
            if len(self._pending) > self.max_pending:
                lost = self._pending.popleft()
                self.dropped += 1
                if self.backfill_path is not None:
                    if self._gaps and self._gaps[-1][1] == lost.seq - 1:
                        self._gaps[-1][1] = lost.seq
                    else:
                        self._gaps.append([lost.seq, lost.seq])
                if self.dropped == 1 or self.dropped % 10_000 == 0:
                    later = ("they will be re-read from it when Redis is back" if self.backfill_path is not None
                             else "backfill them from it with read_events")
                    logger.warning("Redis sink %s: %d undelivered events over the bound of %d left memory "
                                   "(latest seq %d); events.jsonl holds them, %s",
                                   self.key, self.dropped, self.max_pending, lost.seq, later)
            self._cond.notify()

    def _outstanding(self) -> int:
        return len(self._pending) + sum(last - first + 1 for first, last in self._gaps)

    @property
    def pending(self) -> int:
        """Events not yet in the stream (in memory or waiting to be re-read from the JSONL)."""
        with self._cond:
            return self._outstanding()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event is delivered; False if `timeout` ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._outstanding():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to `timeout`), then stop the thread; leftovers are logged."""
        self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=self.max_backoff_s + 1)
        if self._outstanding():
            logger.warning("Redis sink %s closed with %d undelivered events; events.jsonl holds them",
                           self.key, self._outstanding())
        self._redis.close()

    def _deliver_loop(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._outstanding() and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                gap = list(self._gaps[0]) if self._gaps else None
                batch = list(self._pending)[: self.batch_size] if gap is None else []
            try:
                if gap is not None:
                    batch = self._read_gap(*gap)
                acked = self._send(batch)
            except Exception as exc:  # the delivery thread must never die: log, back off, retry
                if self._connected:
                    logger.warning("Redis sink %s: Redis unreachable (%s); buffering and retrying", self.key, exc)
                    self._connected = False
                with self._cond:
                    self._cond.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            if not self._connected:
                logger.info("Redis sink %s: reconnected, replayed the buffered events", self.key)
                self._connected = True
            backoff = 0.05
            with self._cond:
                if gap is not None:  # the gap's events up to the last one read are in the stream now
                    self._gaps[0][0] = batch[-1].seq + 1 if batch else gap[1] + 1
                    if self._gaps[0][0] > self._gaps[0][1]:
                        self._gaps.pop(0)
                for event in batch[:acked]:
                    if self._pending and self._pending[0] is event:  # unless dropped by the bound meanwhile
                        self._pending.popleft()
                self.delivered += acked
                self._cond.notify_all()

    def _read_gap(self, first: int, last: int) -> list[Event]:
        """Up to 16 batches of the run's events with first <= seq <= last, re-read from the JSONL."""
        assert self.backfill_path is not None
        batch = []
        for event in iter_events(self.backfill_path, after_seq=first - 1):
            if event["seq"] > last or len(batch) >= 16 * self.batch_size:
                break
            if event.get("run_id") == self.run_id:
                batch.append(Event.from_dict(event))
        if not batch:
            logger.error("Redis sink %s: seq %d-%d are not in %s; they cannot be replayed",
                         self.key, first, last, self.backfill_path)
        return batch

    def _send(self, batch: list[Event]) -> int:
        """XADD the batch in one round trip; returns how many leading events are now in the stream."""
        import redis

        pipe = self._redis.pipeline(transaction=False)
        for event in batch:
            pipe.xadd(self.key, {"event": event.to_json()}, id=stream_id(event.seq))
        results = pipe.execute(raise_on_error=False)
        acked = 0
        for event, result in zip(batch, results, strict=True):
            if isinstance(result, self._errors):
                raise result
            if isinstance(result, redis.ResponseError):
                if "equal or smaller" not in str(result):
                    raise result
                if not self._already_in_stream(event):  # another writer's entries are ahead: add it anyway
                    logger.warning("Redis sink %s: seq %d is behind the stream's last entry; added with an "
                                   "automatic id", self.key, event.seq)
                    self._redis.xadd(self.key, {"event": event.to_json()})
            acked += 1
        return acked

    def _already_in_stream(self, event: Event) -> bool:
        entries: list[Any] = self._redis.xrange(self.key, min=stream_id(event.seq), max=stream_id(event.seq))
        return bool(entries)
