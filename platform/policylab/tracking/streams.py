"""The Redis Streams side of ingest: discover run streams, read them with a consumer group, ack.

Streams are discovered by SCAN on `policylab:run:*:events` (docs/decisions/0005-live-tracking.md):
the consumer then needs nothing from the supervisor, and a stream that reappears after a Redis
restart is found again. Each stream gets the consumer group GROUP, created at id 0 so that entries
written before the group existed are read too. Entries are acked only after their rows are committed
(at-least-once delivery; ingest is idempotent). Entries left pending by a consumer that died are taken
over with XAUTOCLAIM once idle for `claim_idle_ms`.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any, cast

import redis
from django.db import DatabaseError, close_old_connections

from policylab.tracking.ingest import ingest_events
from trainer.telemetry.events import EventError, parse_event
from trainer.telemetry.redis_stream import stream_key

log = logging.getLogger(__name__)

STREAM_PATTERN = "policylab:run:*:events"
GROUP = "policylab-ingest"


def stream_name(run_id: str | int) -> str:
    """The Redis Stream of a run (telemetry contract)."""
    return stream_key(str(run_id))


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class StreamIngestor:
    """Reads every run stream through one consumer group and hands the events to `ingest_events`."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        consumer: str | None = None,
        count: int = 2000,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
        rescan_s: float = 2.0,
        ingest: Callable[..., dict[int, int]] = ingest_events,
    ) -> None:
        self.client = client
        self.consumer = consumer or default_consumer_name()
        self.count = count
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self.rescan_s = rescan_s
        self.ingest = ingest
        self.streams: set[str] = set()
        self.last_scan = 0.0

    def discover(self) -> set[str]:
        """Find run streams (SCAN) and make sure each has the consumer group."""
        found = {key.decode() if isinstance(key, bytes) else key for key in self.client.scan_iter(STREAM_PATTERN, count=1000)}
        for stream in found - self.streams:
            try:
                self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self.streams = found
        self.last_scan = time.monotonic()
        return found

    def handle(self, entries: list[tuple[str, list[tuple[Any, dict]]]]) -> int:
        """Ingest the entries of XREADGROUP/XAUTOCLAIM, then ack them; returns the number of events."""
        events, acks = [], []
        for stream, messages in entries:
            stream = stream.decode() if isinstance(stream, bytes) else stream
            for entry_id, fields in messages:
                acks.append((stream, entry_id))
                raw = fields.get(b"event", fields.get("event")) if fields else None
                if raw is None:
                    log.warning("%s %s has no 'event' field; acked and skipped", stream, entry_id)
                    continue
                try:
                    events.append(parse_event(raw))
                except EventError as exc:
                    log.warning("%s %s skipped: %s", stream, entry_id, exc)
        if events:
            self.ingest(events)
        by_stream: dict[str, list] = {}
        for stream, entry_id in acks:
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            self.client.xack(stream, GROUP, *ids)
        return len(events)

    def read_once(self) -> int:
        """One XREADGROUP over every known stream (blocking up to block_ms); returns events stored."""
        if not self.streams or time.monotonic() - self.last_scan > self.rescan_s:
            self.discover()
        if not self.streams:
            time.sleep(self.block_ms / 1000)
            return 0
        try:
            entries = self.client.xreadgroup(
                GROUP, self.consumer, {s: ">" for s in self.streams}, count=self.count, block=self.block_ms
            )
        except redis.ResponseError as exc:
            if not str(exc).startswith(("NOGROUP", "UNBLOCKED")):
                raise
            # A stream was deleted (UNBLOCKED while we waited on it: the supervisor drops a stale
            # stream before a run's first job) or Redis restarted without persistence: find the
            # streams again.
            self.streams = set()
            return 0
        return self.handle(cast(list[tuple[str, list[tuple[Any, dict]]]], entries or []))  # redis types it loosely

    def claim_stale(self) -> int:
        """Take over entries that a dead consumer read but never acked."""
        total = 0
        for stream in list(self.streams):
            start = "0-0"
            while True:
                try:
                    reply = self.client.xautoclaim(
                        stream, GROUP, self.consumer, self.claim_idle_ms, start_id=start, count=self.count
                    )
                except redis.ResponseError as exc:
                    if "NOGROUP" not in str(exc):
                        raise
                    self.streams.discard(stream)
                    break
                start, messages = reply[0], reply[1]
                if messages:
                    total += self.handle([(stream, messages)])
                if start in (b"0-0", "0-0") or not messages:
                    break
        return total

    def run(self, should_stop: Callable[[], bool] = lambda: False, claim_every_s: float = 10.0) -> None:
        """Loop until `should_stop()`; survives Redis outages and database errors (retries with
        backoff; entries that were read but not stored stay pending and are claimed again)."""
        last_claim = 0.0
        backoff = 0.5
        while not should_stop():
            try:
                if time.monotonic() - last_claim > claim_every_s:
                    self.discover()
                    self.claim_stale()
                    last_claim = time.monotonic()
                self.read_once()
                backoff = 0.5
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("Redis unreachable (%s); retrying in %.1f s", exc, backoff)
                self.streams = set()
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            except DatabaseError as exc:
                log.warning("database error (%s); retrying in %.1f s", exc, backoff)
                close_old_connections()
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
