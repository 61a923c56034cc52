"""Turn trainer telemetry events into rows, in bulk and idempotently, then tell the run's browsers.

The one entry point is `ingest_events(events)`; the Redis Stream consumer (streams.py) and the JSONL
backfill (`manage.py import_events`) both call it. Idempotency comes from unique keys:
(run, key, step) for metrics, (run, step, group_id, sample_index) for rollouts, (run, step) for
checkpoints, (run, seq, …) for logs and system points. A row is overwritten only by an event with a
larger-or-equal seq, so a resumed attempt that re-emits a step wins over the first attempt, and a
replay of old events never rolls a newer value back.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from policylab.experiments import statuses
from policylab.experiments.models import Run, RunStatus
from policylab.tracking.models import (
    Checkpoint,
    IngestCursor,
    LogLine,
    MetricPoint,
    RolloutSample,
    SystemPoint,
)
from trainer.telemetry.events import EventError, parse_event

log = logging.getLogger(__name__)

# Live websocket messages carry at most LIVE_SAMPLES rollouts per event, without token arrays and
# with texts cut to LIVE_TEXT_LIMIT; the rollout inspector reads the full samples through the API.
LIVE_TEXT_LIMIT = 1000
LIVE_SAMPLES = 64
MESSAGE_VALUES = 5000


def group_name(run_id: int) -> str:
    """The Channels group of a run's browsers."""
    return f"run-{run_id}"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Events of an events.jsonl file; a torn last line (the writer died mid-line) is skipped."""
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield parse_event(line)
            except EventError as exc:
                log.warning("%s:%d skipped: %s", path, line_no, exc)


def finite_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class RunBatch:
    """The rows built from one run's events in one ingest call."""

    metrics: dict[tuple[str, int], tuple] = field(default_factory=dict)  # (key, step) -> MetricPoint row
    rollouts: dict[tuple[int, int, int], RolloutSample] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    logs: list[LogLine] = field(default_factory=list)
    system: dict[tuple[int, str], tuple] = field(default_factory=dict)  # (seq, key) -> SystemPoint row
    status: dict[str, Any] | None = None

    def add(self, run_id: int, event: dict[str, Any]) -> None:
        """Build the rows of one event; within a batch the larger seq wins on a shared unique key."""
        seq, step, time, attempt, data = event["seq"], event["step"], float(event["time"]), event["attempt"], event["data"]
        common = {"run_id": run_id, "seq": seq, "attempt": attempt}
        kind = event["type"]
        if kind == "metrics":
            for key, value in (data.get("values") or {}).items():
                self.metrics[(key, step)] = (run_id, key, step, finite_or_none(value), time, attempt, seq)
        elif kind == "system":
            for key, value in (data.get("values") or {}).items():
                self.system[(seq, key)] = (run_id, key, step, finite_or_none(value), time, attempt, seq)
        elif kind == "rollouts":
            for index, sample in enumerate(data.get("samples") or []):
                row = rollout_row(sample, index, step, time, common)
                self.rollouts[(row.step, row.group_id, row.sample_index)] = row
        elif kind == "checkpoint":
            ck_step = int(data.get("step", step))
            self.checkpoints[ck_step] = Checkpoint(
                step=ck_step,
                path=str(data.get("path", "")),
                size_bytes=int(data.get("size_bytes") or 0),
                contents=list(data.get("contents") or []),
                created_at=datetime.fromtimestamp(time, tz=UTC),
                **common,
            )
        elif kind == "log":
            lines = data.get("lines") or []
            if isinstance(lines, str):
                lines = lines.splitlines()
            level = str(data.get("level", "info"))[:16]
            self.logs.extend(
                LogLine(line_no=i, level=level, text=str(text), time=time, **common) for i, text in enumerate(lines)
            )
        elif kind == "status" and (self.status is None or seq > self.status["seq"]):
            self.status = event


def rollout_row(sample: Mapping[str, Any], index: int, step: int, time: float, common: dict) -> RolloutSample:
    def count(name: str) -> int:
        return int(sample.get(name) or 0)

    group = sample.get("group_id")
    return RolloutSample(
        step=step,
        group_id=int(group) if group is not None else index,
        sample_index=int(sample.get("sample_index", index)),
        prompt=str(sample.get("prompt", "")),
        response=str(sample.get("response", "")),
        reward=finite_or_none(sample.get("reward")),
        advantage=finite_or_none(sample.get("advantage")),
        prompt_length=count("prompt_length"),
        response_length=count("response_length"),
        stop_reason=str(sample.get("stop_reason") or "")[:32],
        tokens=sample.get("tokens"),
        token_logprobs=sample.get("token_logprobs"),
        token_advantages=sample.get("token_advantages"),
        time=time,
        **common,
    )


POINT_COLUMNS = ("run", "key", "step", "value", "time", "attempt", "seq")


def upsert_points(model: type[MetricPoint] | type[SystemPoint], rows: list[tuple], unique: tuple[str, ...]) -> None:
    """INSERT … VALUES (…), (…), … ON CONFLICT (unique) DO UPDATE … WHERE excluded.seq >= seq.

    The hot path of ingest (every metric value is a row): Django's bulk_create costs tens of µs per
    row in field preparation, and cannot say "only if newer"; one row per statement (executemany)
    costs a round trip per row on PostgreSQL. The same SQL runs on SQLite (≥ 3.24) and PostgreSQL;
    a replay of older events never overwrites a newer attempt's value.
    """
    if not rows:
        return
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = [quote(model._meta.get_field(name).column) for name in POINT_COLUMNS]
    conflict = ", ".join(quote(model._meta.get_field(name).column) for name in unique)
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns[3:])
    seq = quote("seq")
    row_sql = f"({', '.join(['%s'] * len(columns))})"
    per_statement = max(1, min(1000, (connection.features.max_query_params or 7000) // len(columns)))

    def statement(n: int) -> str:
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row_sql] * n)} "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {updates} WHERE excluded.{seq} >= {table}.{seq}"
        )

    if connection.vendor == "postgresql":
        copy_upsert(model, rows, columns, conflict, updates)
        return
    full = statement(per_statement)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            cursor.execute(full if len(chunk) == per_statement else statement(len(chunk)), [v for row in chunk for v in row])


def copy_upsert(model: type, rows: list[tuple], columns: list[str], conflict: str, updates: str) -> None:
    """PostgreSQL: COPY the rows into a temporary table, then one INSERT … SELECT … ON CONFLICT
    (measured ~5x faster than multi-row VALUES). Runs inside the caller's transaction."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    staging = quote(f"incoming_{model._meta.db_table}")
    types = [model._meta.get_field(name).db_type(connection) for name in POINT_COLUMNS]
    seq = quote("seq")
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor, for COPY
        raw.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {staging} ({', '.join(f'{c} {t}' for c, t in zip(columns, types, strict=True))}) "
            "ON COMMIT DELETE ROWS"
        )
        with raw.copy(f"COPY {staging} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        raw.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM {staging} "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {updates} WHERE excluded.{seq} >= {table}.{seq}"
        )
        raw.execute(f"TRUNCATE {staging}")


def drop_stale(rows: dict, model: type, run_id: int, key_fields: tuple[str, ...], min_seq: int) -> list:
    """Rows of `rows` (keyed by `key_fields` values) that would not overwrite a row with a larger seq."""
    first = key_fields[0]
    stored = model.objects.filter(
        run_id=run_id, seq__gt=min_seq, **{f"{first}__in": {key[0] for key in rows}}
    ).values_list(*key_fields, "seq")
    newer = {tuple(values[:-1]): values[-1] for values in stored}
    return [row for key, row in rows.items() if newer.get(key, -1) <= row.seq]


def store_run_batch(run_id: int, batch: RunBatch, cursor: IngestCursor) -> None:
    """Write one run's rows; call inside a transaction."""
    upsert_points(MetricPoint, list(batch.metrics.values()), ("run", "key", "step"))
    upsert_points(SystemPoint, list(batch.system.values()), ("run", "seq", "key"))
    min_seq = min([row.seq for row in batch.rollouts.values()] + [cursor.last_seq + 1])
    rollouts = (
        drop_stale(batch.rollouts, RolloutSample, run_id, ("step", "group_id", "sample_index"), min_seq)
        if min_seq <= cursor.last_seq  # a replay: keep newer attempts' samples
        else list(batch.rollouts.values())
    )
    RolloutSample.objects.bulk_create(
        rollouts,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["run", "step", "group_id", "sample_index"],
        update_fields=[
            "prompt", "response", "reward", "advantage", "prompt_length", "response_length", "stop_reason",
            "tokens", "token_logprobs", "token_advantages", "attempt", "seq", "time",
        ],
    )
    Checkpoint.objects.bulk_create(
        list(batch.checkpoints.values()),
        update_conflicts=True,
        unique_fields=["run", "step"],
        update_fields=["path", "size_bytes", "contents", "attempt", "seq", "created_at"],
    )
    LogLine.objects.bulk_create(batch.logs, batch_size=2000, ignore_conflicts=True)
    if batch.status is not None and batch.status["seq"] > cursor.last_seq:
        apply_status(run_id, batch.status)


def status_event_may_set(run: Run, status: str, attempt: int) -> bool:
    """Whether a trainer `status` event may change the run's status, given that ingest can lag.

    The supervisor owns the lifecycle (retries, cancel); trainer events only fill it in. So an
    event of an attempt older than the run's latest one never counts (attempt 1's late `failed`
    must not end a run that attempt 2 is training), a cancel stands, and a finished run is not
    reopened by a `running` event read after the end.
    """
    latest_attempt = run.attempts.aggregate(latest=Max("number"))["latest"] or 0
    if attempt < latest_attempt or run.status == RunStatus.CANCELLED:
        return False
    return not (run.status in statuses.TERMINAL and status == statuses.RUNNING)


def apply_status(run_id: int, event: dict[str, Any]) -> None:
    """Advance the Run's progress (and status) from the newest `status` event."""
    data = event["data"]
    changes: dict[str, Any] = {"current_step": max(0, int(data.get("step", event["step"])))}
    if data.get("total_steps") is not None:
        changes["total_steps"] = int(data["total_steps"])
    if "eta_s" in data:
        changes["eta_seconds"] = finite_or_none(data["eta_s"])
    if data.get("message"):
        changes["message"] = str(data["message"])
    status = statuses.FROM_TRAINER_STATE.get(str(data.get("state", "")))
    run = Run.objects.only("status", "started_at", "finished_at").get(pk=run_id)
    if status is not None and not status_event_may_set(run, status, int(event["attempt"])):
        status = None
    if status is not None:
        changes["status"] = status
        now = timezone.now()
        if status == RunStatus.RUNNING:
            changes["finished_at"] = None
            if run.started_at is None:
                changes["started_at"] = now
        else:
            changes["finished_at"] = now
    Run.objects.filter(pk=run_id).update(**changes)


def live_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event as browsers receive it: rollouts without token arrays and with shortened texts."""
    slim = {k: event[k] for k in ("type", "seq", "step", "time", "attempt")}
    data = event["data"]
    if event["type"] == "rollouts":
        data = {
            "samples": [
                {
                    **{k: v for k, v in s.items() if k not in ("tokens", "token_logprobs", "token_advantages")},
                    "prompt": str(s.get("prompt", ""))[:LIVE_TEXT_LIMIT],
                    "response": str(s.get("response", ""))[:LIVE_TEXT_LIMIT],
                }
                for s in (data.get("samples") or [])[:LIVE_SAMPLES]
            ]
        }
    elif event["type"] in ("metrics", "system"):
        data = {"values": {k: finite_or_none(v) for k, v in (data.get("values") or {}).items()}}
    elif event["type"] == "status":  # browsers show the run status, not the trainer's state name
        data = {**data, "status": statuses.FROM_TRAINER_STATE.get(str(data.get("state")), data.get("state"))}
    slim["data"] = data
    return slim


def resolve_run_id(value: str | int) -> int | None:
    """The platform Run pk of a telemetry `run_id` (Run.trainer_run_id is str(pk)); None if unknown."""
    text = str(value)
    if text.startswith("run-"):
        text = text[4:]
    return int(text) if text.isdigit() else None


def ingest_events(
    events: Iterable[Mapping[str, Any]],
    *,
    run_id: int | None = None,
    publish: bool = True,
    backfill_gaps: bool = True,
) -> dict[int, int]:
    """Store `events` (already parsed) and publish them to each run's group.

    `run_id` forces every event onto that Run (a JSONL file written under another run id).
    With `backfill_gaps`, a run whose first new seq is beyond the stored cursor + 1 (events lost
    while Redis was down) is first backfilled from its run directory's events.jsonl, when readable.
    Returns {run pk: number of events stored}. Events of unknown runs are logged and skipped.
    """
    by_run: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        target = run_id if run_id is not None else resolve_run_id(event["run_id"])
        if target is None:
            log.warning("event seq %s of unknown run %r skipped", event.get("seq"), event.get("run_id"))
            continue
        by_run[target].append(dict(event))
    known = set(Run.objects.filter(pk__in=by_run).values_list("pk", flat=True))
    stored: dict[int, int] = {}
    for pk, run_events in by_run.items():
        if pk not in known:
            log.warning("%d events of run %s skipped: no such run", len(run_events), pk)
            continue
        run_events.sort(key=lambda e: e["seq"])
        if backfill_gaps:
            run_events = with_backfill(pk, run_events)
        last_seq = store_events(pk, run_events)
        stored[pk] = len(run_events)
        if publish:
            publish_events(pk, run_events, last_seq)
    return stored


def store_events(run_id: int, events: list[dict[str, Any]]) -> int:
    """Store one run's events (sorted by seq) in one transaction; returns the run's new cursor."""
    batch = RunBatch()
    for event in events:
        batch.add(run_id, event)
    with transaction.atomic():
        cursor, _ = IngestCursor.objects.select_for_update().get_or_create(run_id=run_id)
        store_run_batch(run_id, batch, cursor)
        new_last = max(cursor.last_seq, events[-1]["seq"])
        if new_last != cursor.last_seq:
            IngestCursor.objects.filter(run_id=run_id).update(last_seq=new_last, updated_at=timezone.now())
    return new_last


def with_backfill(run_id: int, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events` (sorted by seq) merged with the events the run's events.jsonl holds for the seqs
    missing between the stored cursor and the last of them (lost while Redis was down)."""
    cursor = IngestCursor.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first()
    expected_next = 1 if cursor is None else cursor + 1  # the emitter's first seq is 1
    have = {e["seq"] for e in events}
    missing = set(range(expected_next, events[-1]["seq"] + 1)) - have
    if not missing:
        return events
    path = Run(pk=run_id).run_dir / "events.jsonl"
    if not path.is_file():
        log.warning("run %s: %d events missing (seq %d..%d) and %s not readable", run_id, len(missing), min(missing), max(missing), path)
        return events
    found = [e for e in read_jsonl(path) if e["seq"] in missing]
    log.info("run %s: backfilled %d of %d missing events from %s", run_id, len(found), len(missing), path)
    return sorted(events + found, key=lambda e: e["seq"])


def publish_events(run_id: int, events: list[dict[str, Any]], last_seq: int) -> None:
    """Send the stored events to the run's browsers (best effort: the rows are already committed)."""
    layer = get_channel_layer()
    if layer is None:
        return
    live = [live_event(e) for e in events]
    checkpoints = [e for e in live if e["type"] == "checkpoint"]
    if checkpoints:  # the page's Resume and Fork buttons need the row ids
        ids = dict(Checkpoint.objects.filter(run_id=run_id).values_list("step", "pk"))
        for e in checkpoints:
            e["data"] = {**e["data"], "id": ids.get(int(e["data"].get("step", e["step"])))}
    try:
        async_to_sync(send_chunks)(layer, group_name(run_id), live, last_seq)
    except Exception:  # a channel layer outage must not lose the (committed) batch or stop ingest
        log.exception("run %s: publishing %d events failed", run_id, len(events))


def chunk_events(events: list[dict[str, Any]], max_values: int = MESSAGE_VALUES) -> Iterator[list[dict[str, Any]]]:
    """Consecutive slices of `events` holding about `max_values` values (or samples, or lines) each,
    so that no websocket frame (daphne allows 1 MiB) or Redis value grows with the ingest batch."""
    chunk: list[dict[str, Any]] = []
    size = 0
    for event in events:
        chunk.append(event)
        data = event["data"]
        size += len(data.get("values") or data.get("samples") or data.get("lines") or ()) + 1
        if size >= max_values:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


async def send_chunks(layer, group: str, events: list[dict[str, Any]], last_seq: int) -> None:
    for chunk in chunk_events(events):
        await layer.group_send(group, {"type": "run.events", "seq": last_seq, "events": chunk})
