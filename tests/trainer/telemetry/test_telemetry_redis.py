"""Redis Stream sink against real Redis servers: delivery, outage and restart, bounded buffer."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from trainer.telemetry import EventEmitter, JsonlSink, read_events
from trainer.telemetry.redis_stream import RedisStreamSink, stream_key


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """A throw-away redis-server we can kill and restart on the same port."""

    def __init__(self, workdir: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
        self.port, self.workdir, self.proc = free_port(), workdir, None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    yield server
    if server.proc is not None:
        server.kill()


def stream_events(url: str, run_id: str) -> list[dict]:
    entries = redis.Redis.from_url(url).xrange(stream_key(run_id))
    return [json.loads(fields[b"event"]) for _, fields in entries]


def test_events_reach_the_stream_identical_to_the_jsonl(redis_url: str, tmp_path: Path) -> None:
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    try:
        sink = RedisStreamSink(redis_url, run_id)
        with EventEmitter(run_id, 1, [JsonlSink(tmp_path / "events.jsonl"), sink]) as emitter:
            emitter.status("starting", step=0, total_steps=5)
            for step in range(5):
                emitter.metrics({"reward/mean": step / 5, "timing/step_s": 0.1}, step=step)
            assert sink.flush(timeout=10)
        assert stream_events(redis_url, run_id) == read_events(tmp_path / "events.jsonl")
        ids = [entry_id for entry_id, _ in client.xrange(stream_key(run_id))]
        assert ids == [f"{seq}-1".encode() for seq in range(1, 7)]
        # a later attempt on a machine without the JSONL continues after the stream's last seq
        with EventEmitter(run_id, 2, [JsonlSink(tmp_path / "other" / "events.jsonl"),
                                      RedisStreamSink(redis_url, run_id)]) as again:
            assert again.seq == 6
            again.status("running", step=5)
        assert [e["seq"] for e in stream_events(redis_url, run_id)] == list(range(1, 8))
        client.xadd(stream_key(run_id), {"event": "{}"}, id="1000-0")  # a foreign entry ahead of our ids
        with EventEmitter(run_id, 3, [RedisStreamSink(redis_url, run_id, socket_timeout_s=0.5)]) as third:
            third.seq = 7  # as if resumed from a JSONL ending at seq 7
            third.log("info", "still delivered", step=5)
        assert stream_events(redis_url, run_id)[-1]["seq"] == 8
    finally:
        client.delete(stream_key(run_id))


def test_outage_and_restart_deliver_every_event_exactly_once_in_order(own_redis: RedisServer) -> None:
    own_redis.start()
    run_id = "outage"
    sink = RedisStreamSink(own_redis.url, run_id, max_backoff_s=0.2, socket_timeout_s=1.0)
    emitter = EventEmitter(run_id, 1, [sink])
    for step in range(5):
        emitter.metrics({"x": step}, step=step)
    assert sink.flush(timeout=10)
    received = stream_events(own_redis.url, run_id)  # a consumer reads what arrived before the crash

    own_redis.kill()  # no persistence: the restarted server starts empty
    started = time.monotonic()
    for step in range(5, 12):
        emitter.metrics({"x": step}, step=step)
    # training is never blocked by the outage: an emit that waited for the dead server would take
    # the socket timeout (1 s) each, 7 s in all; the bound leaves a busy machine room to spare
    assert time.monotonic() - started < 3.0
    time.sleep(0.5)
    assert sink.pending == 7

    own_redis.start()
    emitter.metrics({"x": 12}, step=12)
    assert sink.flush(timeout=15)
    received += stream_events(own_redis.url, run_id)
    emitter.close()
    assert [e["seq"] for e in received] == list(range(1, 14))
    assert [e["data"]["values"]["x"] for e in received] == [float(x) for x in range(13)]
    assert sink.delivered == 13 and sink.dropped == 0


def test_buffer_is_bounded_with_a_warning(own_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    sink = RedisStreamSink(own_redis.url, "bounded", max_pending=3, max_backoff_s=0.2, socket_timeout_s=0.5)
    emitter = EventEmitter("bounded", 1, [sink])
    with caplog.at_level(logging.WARNING, logger="trainer.telemetry.redis_stream"):
        for step in range(5):  # nothing listens on the port yet
            emitter.metrics({"x": step}, step=step)
    assert sink.dropped == 2 and sink.pending == 3
    assert "undelivered events over the bound of 3 left memory (latest seq 1)" in caplog.text
    assert "backfill them from it with read_events" in caplog.text
    own_redis.start()
    assert sink.flush(timeout=15)
    emitter.close()
    assert [e["seq"] for e in stream_events(own_redis.url, "bounded")] == [3, 4, 5]


def test_events_over_the_bound_are_replayed_from_the_jsonl(own_redis: RedisServer, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    sink = RedisStreamSink(own_redis.url, "replay", backfill_path=path, max_pending=4, batch_size=2,
                           max_backoff_s=0.2, socket_timeout_s=0.5)
    emitter = EventEmitter("replay", 1, [JsonlSink(path), sink])
    for step in range(11):  # Redis down: 7 events leave memory, 4 stay queued
        emitter.metrics({"x": step}, step=step)
    assert sink.dropped == 7 and sink.pending == 11
    own_redis.start()
    emitter.metrics({"x": 11}, step=11)
    assert sink.flush(timeout=15)
    emitter.close()
    assert stream_events(own_redis.url, "replay") == read_events(path)
    assert [e["seq"] for e in read_events(path)] == list(range(1, 13))
