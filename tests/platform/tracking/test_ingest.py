"""Ingest from real Redis Streams and JSONL files: idempotent, resume-aware, gap-free."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command

from policylab.experiments.models import RunStatus
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import (
    Checkpoint,
    IngestCursor,
    LogLine,
    MetricPoint,
    RolloutSample,
    SystemPoint,
)
from policylab.tracking.streams import GROUP, StreamIngestor, stream_name
from tests.platform.tracking.conftest import event
from trainer.telemetry.events import EventError, parse_event

pytestmark = pytest.mark.django_db


def run_events(run_id, steps: int = 6, attempt: int = 1, first_seq: int = 1, first_step: int = 1, scale: float = 1.0) -> list[dict]:
    """A small run: status, then per step metrics + rollouts + system, a checkpoint every 3 steps, logs."""
    out, seq = [], first_seq
    out.append(event("status", run_id, seq, first_step - 1, {"state": "running", "step": first_step - 1, "total_steps": 20, "eta_s": 30.0, "message": ""}, attempt))
    for step in range(first_step, first_step + steps):
        seq += 1
        out.append(event("metrics", run_id, seq, step, {"values": {"reward/mean": scale * step, "actor/pg_loss": -step / 10, "actor/kl": float("nan") if step == 2 else 0.01}}, attempt))
        seq += 1
        samples = [{"prompt": f"p{g}", "response": f"answer {step}-{g}-{i}", "reward": float(i), "advantage": i - 0.5,
                    "prompt_length": 3, "response_length": 5 + i, "stop_reason": "eos" if i else "length",
                    "group_id": g, "sample_index": i} for g in range(2) for i in range(2)]
        out.append(event("rollouts", run_id, seq, step, {"samples": samples}, attempt))
        seq += 1
        out.append(event("system", run_id, seq, step, {"values": {"cpu/percent": 50.0 + step, "memory/rss_gb": 1.5}}, attempt))
        if step % 3 == 0:
            seq += 1
            out.append(event("checkpoint", run_id, seq, step, {"step": step, "path": f"/runs/ck/step_{step}", "size_bytes": 1024, "contents": ["model", "optimizer"]}, attempt))
        seq += 1
        out.append(event("log", run_id, seq, step, {"level": "info", "lines": [f"step {step} done", "second line"]}, attempt))
    seq += 1
    out.append(event("status", run_id, seq, first_step + steps - 1, {"state": "running", "step": first_step + steps - 1, "total_steps": 20, "eta_s": 12.5, "message": ""}, attempt))
    return out


def xadd_all(client, run_id, events: list[dict]) -> str:
    key = stream_name(run_id)
    for e in events:
        client.xadd(key, {"event": json.dumps(e)})
    return key


def drain(ingestor: StreamIngestor) -> int:
    total = 0
    while n := ingestor.read_once():
        total += n
    return total


def snapshot_rows(run) -> dict:
    return {
        "metrics": sorted(MetricPoint.objects.filter(run=run).values_list("key", "step", "value", "attempt")),
        "rollouts": RolloutSample.objects.filter(run=run).count(),
        "checkpoints": list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)),
        "logs": LogLine.objects.filter(run=run).count(),
        "system": SystemPoint.objects.filter(run=run).count(),
    }


@pytest.fixture
def ingestor(redis_client):
    ing = StreamIngestor(redis_client, consumer=f"test-{uuid.uuid4().hex[:6]}", block_ms=50)
    yield ing
    for key in ing.streams:
        redis_client.delete(key)


def test_stream_and_jsonl_replayed_twice_leave_one_point_per_key_and_step(make_run, redis_client, ingestor, tmp_path: Path) -> None:
    run = make_run()
    events = run_events(run.pk)
    key = xadd_all(redis_client, run.pk, events)
    ingestor.streams.discard(key)  # force a fresh group from id 0 each replay
    assert drain(ingestor) == len(events)
    first = snapshot_rows(run)
    assert len(first["metrics"]) == 3 * 6
    assert first["rollouts"] == 6 * 4 and first["checkpoints"] == [3, 6] and first["logs"] == 12 and first["system"] == 12
    assert redis_client.xpending(key, GROUP)["pending"] == 0  # everything acked after commit

    # Replay the whole stream twice (a new consumer group reads it from the start each time) ...
    for _ in range(2):
        redis_client.xgroup_destroy(key, GROUP)
        ingestor.streams = set()
        assert drain(ingestor) == len(events)
    # ... and the JSONL file twice.
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    for _ in range(2):
        call_command("import_events", str(run.pk), str(path), "--no-publish")
    assert snapshot_rows(run) == first
    assert MetricPoint.objects.get(run=run, key="actor/kl", step=2).value is None  # NaN stored as a gap
    run.refresh_from_db()
    assert (run.status, run.current_step, run.total_steps, run.eta_seconds) == (RunStatus.RUNNING, 6, 20, 12.5)
    assert IngestCursor.objects.get(run=run).last_seq == events[-1]["seq"]


def test_resumed_attempt_overwrites_steps_and_old_replays_never_roll_back(make_run) -> None:
    run = make_run()
    attempt1 = run_events(run.pk, steps=6)
    ingest_events(attempt1, publish=False)
    # Attempt 2 resumes from the checkpoint of step 3 and re-emits steps 4..8 with other values.
    attempt2 = run_events(run.pk, steps=5, attempt=2, first_seq=attempt1[-1]["seq"] + 1, first_step=4, scale=10.0)
    ingest_events(attempt2, publish=False)
    rewards = dict(MetricPoint.objects.filter(run=run, key="reward/mean").values_list("step", "value"))
    assert rewards == {1: 1.0, 2: 2.0, 3: 3.0, 4: 40.0, 5: 50.0, 6: 60.0, 7: 70.0, 8: 80.0}
    # A late replay of attempt 1 (old seqs) must not undo attempt 2.
    ingest_events(attempt1, publish=False)
    assert dict(MetricPoint.objects.filter(run=run, key="reward/mean").values_list("step", "value")) == rewards
    assert set(RolloutSample.objects.filter(run=run, step=5).values_list("attempt", flat=True)) == {2}
    assert MetricPoint.objects.filter(run=run).count() == 3 * 8
    # the cursor never moves back: a replay's last seq is older than what is stored
    assert IngestCursor.objects.get(run=run).last_seq == attempt2[-1]["seq"]


def test_gap_in_seq_is_backfilled_from_the_run_directory(make_run, runs_dir) -> None:
    run = make_run()
    events = run_events(run.pk, steps=6)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    ingest_events(events[:5], publish=False)
    # events[5:8] and events[12:15] never reached the stream: a leading and an inner gap.
    ingest_events(events[8:12] + events[15:], publish=False)
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 6
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [3, 6]
    assert LogLine.objects.filter(run=run).count() == 12


def test_entries_of_a_dead_consumer_are_claimed_and_stored(make_run, redis_client, ingestor) -> None:
    run = make_run()
    events = run_events(run.pk, steps=3)
    key = xadd_all(redis_client, run.pk, events)
    ingestor.discover()
    # A consumer reads everything and dies before acking.
    redis_client.xreadgroup(GROUP, "dead-consumer", {key: ">"}, count=1000)
    assert drain(ingestor) == 0 and MetricPoint.objects.filter(run=run).count() == 0
    ingestor.claim_idle_ms = 0
    assert ingestor.claim_stale() == len(events)
    assert MetricPoint.objects.filter(run=run).count() == 9
    assert redis_client.xpending(key, GROUP)["pending"] == 0


def test_bad_events_are_reported_by_field_and_skipped(make_run, redis_client, ingestor) -> None:
    with pytest.raises(EventError, match="'seq' is missing"):
        parse_event({"type": "metrics", "run_id": "1", "attempt": 1, "step": 0, "time": 0.0, "data": {}})
    with pytest.raises(EventError, match="valid types"):
        parse_event(json.dumps(event("weather", 1, 1, 0, {})))
    run = make_run()
    key = stream_name(run.pk)
    redis_client.xadd(key, {"event": "{not json"})
    redis_client.xadd(key, {"event": json.dumps(event("metrics", run.pk, 1, 1, {"values": {"reward/mean": 1.0}}))})
    assert drain(ingestor) == 1
    assert MetricPoint.objects.filter(run=run).count() == 1
    assert redis_client.xpending(key, GROUP)["pending"] == 0


def test_import_events_rejects_unknown_runs_and_files(make_run, tmp_path: Path) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="run 999999 does not exist"):
        call_command("import_events", "999999", str(tmp_path / "x.jsonl"))
    run = make_run()
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_events", str(run.pk), str(tmp_path / "missing.jsonl"))


def status_event(run_id, seq: int, state: str, attempt: int = 1) -> dict:
    return event("status", run_id, seq, seq, {"state": state, "step": seq, "total_steps": 20, "eta_s": 1.0, "message": ""}, attempt)


def test_late_status_events_never_undo_what_the_supervisor_decided(make_run) -> None:
    """Ingest can lag the trainer: the supervisor's outcome stands against stale trainer states."""
    from policylab.experiments.models import RunAttempt

    finished = make_run(status=RunStatus.SUCCEEDED)
    ingest_events([status_event(finished.pk, 1, "running")], run_id=finished.pk, publish=False)
    finished.refresh_from_db()
    assert finished.status == RunStatus.SUCCEEDED and finished.current_step == 1  # progress still counts

    cancelled = make_run(status=RunStatus.CANCELLED)
    ingest_events([status_event(cancelled.pk, 1, "failed")], run_id=cancelled.pk, publish=False)
    cancelled.refresh_from_db()
    assert cancelled.status == RunStatus.CANCELLED

    retried = make_run(status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=retried, number=1, status=RunStatus.FAILED)
    RunAttempt.objects.create(run=retried, number=2, status=RunStatus.RUNNING)
    ingest_events([status_event(retried.pk, 1, "failed", attempt=1)], run_id=retried.pk, publish=False)
    retried.refresh_from_db()
    assert retried.status == RunStatus.RUNNING
    ingest_events([status_event(retried.pk, 2, "succeeded", attempt=2)], run_id=retried.pk, publish=False)
    retried.refresh_from_db()
    assert (retried.status, retried.current_step) == (RunStatus.RUNNING, 2)  # the end is the supervisor's verdict


def test_a_stream_deleted_while_ingest_waits_on_it_is_rediscovered(make_run, redis_client, ingestor) -> None:
    """The supervisor drops a stale stream before a run's first job; a consumer blocked on it gets
    UNBLOCKED and must carry on with the streams that exist, not crash."""
    import threading

    run = make_run()
    key = xadd_all(redis_client, run.pk, run_events(run.pk, steps=1))
    drain(ingestor)
    ingestor.block_ms = 3000
    deleter = threading.Timer(0.3, redis_client.delete, args=[key])
    deleter.start()
    assert ingestor.read_once() == 0  # blocked on the stream, then UNBLOCKED by the delete
    deleter.join()
    assert ingestor.streams == set()
    xadd_all(redis_client, run.pk, run_events(run.pk, steps=1, first_seq=100, first_step=5))
    ingestor.block_ms = 50
    ingestor.rescan_s = 0
    assert drain(ingestor) > 0


def test_the_ingest_loop_outlives_a_database_error(ingestor, monkeypatch) -> None:
    """A locked SQLite file (or a PostgreSQL restart) must not end the long-running consumer: the
    entries it read stay pending and are stored on a later pass."""
    from django.db import OperationalError

    calls: list[int] = []

    def read_once() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return 0

    monkeypatch.setattr(ingestor, "read_once", read_once)
    monkeypatch.setattr(ingestor, "claim_stale", lambda: 0)
    monkeypatch.setattr("policylab.tracking.streams.time.sleep", lambda seconds: None)
    ingestor.run(should_stop=lambda: len(calls) >= 2, claim_every_s=1e9)
    assert len(calls) == 2


def test_a_nul_in_a_sample_or_a_log_line_is_stored_not_fatal(make_run) -> None:
    """A random tiny model's byte-level output can decode to NUL, which PostgreSQL's text and jsonb
    refuse: the whole batch used to fail, again at every retry, and the run's ingest stopped there."""
    run = make_run()
    sample = {"prompt": "copy abc\n", "response": "a\x00c", "reward": 0.5, "advantage": 0.1, "prompt_length": 9,
              "response_length": 3, "stop_reason": "length", "group_id": 0, "sample_index": 0, "tokens": ["a", "\x00", "c"]}
    ingest_events([event("rollouts", run.pk, 1, 1, {"samples": [sample]}),
                   event("log", run.pk, 2, 1, {"level": "info", "lines": ["got \x00"]})], run_id=run.pk, publish=False)
    stored = RolloutSample.objects.get(run=run)
    assert (stored.response, stored.tokens) == ("a\ufffdc", ["a", "\ufffd", "c"])
    assert LogLine.objects.get(run=run).text == "got \ufffd"



def test_an_event_that_cannot_be_stored_is_rejected_and_the_consumer_serves_on(make_run, redis_client, ingestor) -> None:
    """Issue 34: `max_steps: 2**63` used to validate, and the trainer's first status event (total_steps 2**63)
    raised OverflowError (SQLite) or DataError (PostgreSQL) out of the consumer's loop: it exited, restarted, read
    the same pending entry and exited again, and no team's telemetry was stored any more. Now the event is
    recorded as rejected on its run, acked, and the real loop (`run`) goes on with every other event."""
    import time

    poisoned, healthy = make_run(), make_run("beta")
    too_big = {"state": "running", "step": 0, "total_steps": 2**63, "eta_s": None, "message": ""}
    xadd_all(redis_client, poisoned.pk, [event("status", poisoned.pk, 1, 0, too_big),
                                         event("metrics", poisoned.pk, 2, 1, {"values": {"reward/mean": 0.5}})])
    xadd_all(redis_client, healthy.pk, [event("metrics", healthy.pk, 1, 1, {"values": {"reward/mean": 1.0}})])
    ingestor.rescan_s = 0
    deadline = time.monotonic() + 30

    def served() -> bool:
        return MetricPoint.objects.filter(run=healthy).exists() or time.monotonic() > deadline

    ingestor.run(should_stop=served, claim_every_s=0.1)  # the consumer's loop itself: it must not raise
    assert MetricPoint.objects.get(run=healthy).value == 1.0
    assert MetricPoint.objects.get(run=poisoned).value == 0.5  # the run's other events are stored
    rejected = LogLine.objects.get(run=poisoned, level="rejected")
    assert rejected.seq == 1 and "status event seq 1" in rejected.text and "not stored" in rejected.text
    poisoned.refresh_from_db()
    assert poisoned.total_steps is None
    assert IngestCursor.objects.get(run=poisoned).last_seq == 2
    for run in (poisoned, healthy):  # acked: nothing is left to claim and read again
        assert redis_client.xpending(stream_name(run.pk), GROUP)["pending"] == 0


def test_a_batch_larger_than_one_statement_stores_every_point_once(make_run) -> None:
    """Points are upserted in statements of up to 5,000 rows (SQLite) or through COPY (PostgreSQL): a batch of
    12,001 points (two full statements and a remainder) keeps each point, and a replay of it adds none."""
    run = make_run()
    events = [event("metrics", run.pk, seq, seq, {"values": {f"k{k}": seq * 1000.0 + k for k in range(100)}})
              for seq in range(1, 121)]
    events.append(event("metrics", run.pk, 121, 121, {"values": {"k0": 7.5}}))
    ingest_events(events, publish=False, backfill_gaps=False)
    ingest_events(events, publish=False, backfill_gaps=False)
    points = MetricPoint.objects.filter(run=run)
    assert points.count() == 12_001
    assert points.get(key="k42", step=77).value == 77_042.0
    assert points.get(key="k0", step=121).value == 7.5


def test_a_sqlite_error_in_the_point_upsert_is_djangos_so_ingest_retries_it(make_run) -> None:
    """The SQLite upsert runs on sqlite3's own connection; its errors must still be Django's OperationalError,
    which the consumer retries (a locked file), not an error of the batch that would reject its events."""
    from django.db import OperationalError, connection

    from policylab.tracking.ingest import POINT_COLUMNS, sqlite_upsert

    if connection.vendor != "sqlite":
        pytest.skip("the SQLite path")
    row = (make_run().pk, "k", 1, 1.0, 0.0, 1, 1)
    with pytest.raises(OperationalError, match="no such table"):
        sqlite_upsert('"no_such_table"', [row], [f'"{c}"' for c in POINT_COLUMNS], '"run", "key", "step"', '"value" = 1')
