"""Redis restarted mid-run: once the trainer's sink reconnects, no point is lost.

The producer is the trainer's own EventEmitter with JsonlSink + RedisStreamSink; the consumer is the
ingest loop in a thread. During the outage the sink's buffer is bounded at 3 events so part of the outage is dropped
from the stream on purpose: those points must come back from the run's events.jsonl (gap backfill).
"""

from __future__ import annotations

import threading
import time

import pytest
import redis

from policylab.tracking.models import IngestCursor, MetricPoint
from policylab.tracking.streams import StreamIngestor
from tests.conftest import free_port, start_redis_server
from trainer.telemetry import EventEmitter, JsonlSink
from trainer.telemetry.redis_stream import RedisStreamSink

pytestmark = pytest.mark.django_db(transaction=True)


def test_no_point_is_lost_when_redis_restarts_mid_run(make_run, runs_dir, tmp_path) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    servers = [start_redis_server(port, tmp_path / "redis")]
    run = make_run()
    sink = RedisStreamSink(url, str(run.pk), max_backoff_s=0.2, socket_timeout_s=0.5)
    emitter = EventEmitter(str(run.pk), 1, [JsonlSink(run.run_dir / "events.jsonl"), sink])
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    ingestor = StreamIngestor(client, consumer="restart-test", block_ms=100, rescan_s=0.2)
    progress = {"first_half_stored": threading.Event(), "done": threading.Event(), "error": None}

    def train() -> None:
        """The trainer side (no database access): emit, lose Redis, emit, get a new Redis, emit."""
        try:
            emitter.status("running", 0, total_steps=15)
            for step in range(1, 6):
                emitter.metrics({"reward/mean": step / 10, "actor/kl": 0.01}, step)
            if not progress["first_half_stored"].wait(20):
                raise AssertionError("ingest never stored the first five steps")
            sink.max_pending = 3  # a small buffer: part of the outage will be dropped from the stream
            servers[0].terminate()
            servers[0].wait(timeout=10)
            for step in range(6, 11):  # Redis is down: buffered (3) or dropped (2), always in events.jsonl
                emitter.metrics({"reward/mean": step / 10, "actor/kl": 0.01}, step)
            servers.append(start_redis_server(port, tmp_path / "redis"))  # fresh and empty, same port
            if not sink.flush(timeout=15):  # the sink reconnects and replays what it buffered
                raise AssertionError("the sink did not drain its buffer into the new Redis")
            sink.max_pending = 100_000
            for step in range(11, 16):
                emitter.metrics({"reward/mean": step / 10, "actor/kl": 0.01}, step)
            if not sink.flush(timeout=15):
                raise AssertionError("the last five steps never reached Redis")
        except Exception as exc:  # surfaced by the assertions below
            progress["error"] = exc
        finally:
            progress["done"].set()

    def stored_steps() -> list[int]:
        return list(MetricPoint.objects.filter(run=run, key="reward/mean").order_by("step").values_list("step", flat=True))

    deadline = time.monotonic() + 30

    def should_stop() -> bool:
        steps = stored_steps()
        if steps == [1, 2, 3, 4, 5]:
            progress["first_half_stored"].set()
        return time.monotonic() > deadline or (progress["done"].is_set() and steps == list(range(1, 16)))

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        ingestor.run(should_stop=should_stop, claim_every_s=1.0)  # the consumer loop, in this thread
        trainer.join(timeout=20)
        assert not trainer.is_alive(), "the trainer side is stuck"
        assert progress["error"] is None, progress["error"]
        assert stored_steps() == list(range(1, 16)), stored_steps()  # nothing is missing ...
        assert sink.dropped == 2  # ... though part of the outage never reached the new stream
        values = dict(MetricPoint.objects.filter(run=run, key="reward/mean").values_list("step", "value"))
        assert values == {step: pytest.approx(step / 10) for step in range(1, 16)}
        assert MetricPoint.objects.filter(run=run).count() == 30  # one point per (key, step)
        assert IngestCursor.objects.get(run=run).last_seq == emitter.seq
    finally:
        emitter.close()
        client.close()
        for server in servers:
            server.terminate()
            server.wait(timeout=10)
