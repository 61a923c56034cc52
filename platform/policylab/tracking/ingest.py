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
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Count, Max, Min, Model, OuterRef, Q, Subquery
from django.utils import timezone

from policylab.experiments import statuses
from policylab.experiments.flat_config import effective_config
from policylab.experiments.models import Run, run_dir_of
from policylab.experiments.run_state import write_run_state
from policylab.redaction import path_in_run, redact_credentials
from policylab.tracking.broadcast import group_name, publish_log_lines
from policylab.tracking.models import (
    AttemptRecord,
    Checkpoint,
    IngestCursor,
    LogLine,
    MetricPoint,
    MetricSummary,
    RolloutSample,
    RunAlert,
    RunProfile,
    RunStall,
    SystemPoint,
)
from policylab.tracking.rollout_facts import mismatch_summary, prompt_hash, token_mismatch
from policylab.tracking.selectors import checkpoint_dicts, log_colours, rollout_dict, stop_reason_words
from trainer.config.bounds import INT64_MAX
from trainer.telemetry.events import EventError, parse_event

log = logging.getLogger(__name__)

# Live websocket messages carry at most LIVE_SAMPLES rollouts per event, without token arrays or an agentic
# trajectory's turns, and with texts cut to LIVE_TEXT_LIMIT; the rollout inspector reads the full samples
# through the API.
LIVE_TEXT_LIMIT = 1000
LIVE_SAMPLES = 64
MESSAGE_VALUES = 5000
HEAVY_SAMPLE_KEYS = ("tokens", "token_logprobs", "token_logprobs_trainer", "token_advantages", "token_mask", "turns")


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
    if value.__class__ is float:  # the common case, ~4x faster (one call per metric point, twice)
        return value if -math.inf < value < math.inf else None
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
    # status events in seq order, a run of the same (attempt, state) kept as its last: every change of
    # state counts (a `succeeded` followed in the same batch by a lagging `running` is not lost)
    status_events: list[dict[str, Any]] = field(default_factory=list)
    # (attempt, "fingerprint" | "resume") -> (seq, data): the newest of each per attempt
    attempt_facts: dict[tuple[int, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)
    stall_events: list[dict[str, Any]] = field(default_factory=list)  # the watchdog's, in seq order
    profiles: dict[tuple[str], RunProfile] = field(default_factory=dict)  # (path,) -> row: the profiler's files
    alerts: list[RunAlert] = field(default_factory=list)  # run-health alerts

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
                LogLine(line_no=i, level=level, text=storable(redact_credentials(str(text))), time=time, **common)
                for i, text in enumerate(lines)
            )
        elif kind in ATTEMPT_FACTS:
            self.attempt_facts[(attempt, kind)] = (seq, storable_json(data))
        elif kind == "stall":
            self.stall_events.append(event)
        elif kind == "profile":
            row = profile_row(data, step, time, common)
            self.profiles[(row.path,)] = row
        elif kind == "alert":
            self.alerts.append(alert_row(data, step, time, common))
        elif kind == "status":
            last = self.status_events[-1] if self.status_events else None
            if last is not None and (last["attempt"], last["data"].get("state")) == (attempt, data.get("state")):
                self.status_events[-1] = event
            else:
                self.status_events.append(event)


ATTEMPT_FACTS = ("fingerprint", "resume")  # event types stored whole on the attempt's AttemptRecord
PAGE_RENDERED = (*ATTEMPT_FACTS, "stall", "profile", "alert")  # event types whose run-page section the server renders


def storable_json(value: Any) -> Any:
    """A JSON value with every string made storable (storable) and non-finite numbers as null."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, Mapping):
        return {storable(k): storable_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable_json(v) for v in value]
    return value


def store_attempt_facts(run_id: int, facts: Mapping[tuple[int, str], tuple[int, dict[str, Any]]]) -> None:
    """Each attempt's fingerprint and resume report onto its AttemptRecord; an event with a smaller seq than the
    one stored (a replay of older events) changes nothing, so replays are idempotent."""
    for attempt in sorted({attempt for attempt, _ in facts}):
        record, _ = AttemptRecord.objects.get_or_create(run_id=run_id, attempt=attempt)
        changed = []
        for kind in ATTEMPT_FACTS:
            if (attempt, kind) not in facts:
                continue
            seq, data = facts[(attempt, kind)]
            if seq >= getattr(record, f"{kind}_seq"):
                setattr(record, kind, data)
                setattr(record, f"{kind}_seq", seq)
                changed += [kind, f"{kind}_seq"]
        if changed:
            record.save(update_fields=changed)


def store_stalls(run_id: int, stall_events: Sequence[dict[str, Any]]) -> None:
    """A `stalled` event is a RunStall (keyed by its seq: a replay creates nothing); a `recovered` one sets
    the duration on the latest stall of that attempt and phase, reported before it and not closed yet (a second
    recovery never overwrites the first one's stall and leaves an earlier stall open)."""
    for event in stall_events:
        data = storable_json(event["data"])
        if data.get("state") == "recovered":
            latest = RunStall.objects.filter(run_id=run_id, attempt=event["attempt"], phase=str(data.get("phase", "")),
                                             seq__lt=event["seq"], recovered_after_s__isnull=True,
                                             ).order_by("-seq").values_list("pk", flat=True)[:1]
            RunStall.objects.filter(pk__in=list(latest)).update(
                recovered_after_s=finite_or_none(data.get("elapsed_s")), recovered_seq=event["seq"],
                recovered_time=datetime.fromtimestamp(float(event["time"]), tz=UTC), recovered_step=event["step"])
            continue
        RunStall.objects.get_or_create(run_id=run_id, seq=event["seq"], defaults={
            "attempt": event["attempt"], "time": datetime.fromtimestamp(float(event["time"]), tz=UTC),
            "step": event["step"],
            "phase": str(data.get("phase", ""))[:64], "summary": redact_credentials(str(data.get("summary", ""))),
            "elapsed_s": finite_or_none(data.get("elapsed_s")) or 0.0, "bound_s": finite_or_none(data.get("bound_s")),
            "on_stall": str(data.get("on_stall", ""))[:32], "waiting": data.get("waiting") or [],
            "stacks": redact_credentials(str(data.get("stacks", ""))), "file": str(data.get("file", ""))[:512],
        })


def profile_row(data: Mapping[str, Any], step: int, time: float, common: dict) -> RunProfile:
    """A RunProfile of a `profile` event's data (trainer.telemetry.events.ProfileData); odd values stored as
    harmless ones: the path is only ever served from inside the run directory (selectors.profile_file)."""
    def number(name: str) -> int:
        value = data.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX else 0

    return RunProfile(path=storable(data.get("path", ""))[:1000], step=step, role=storable(data.get("role", ""))[:32],
                      rank=number("rank"), call=storable(data.get("call", ""))[:64],
                      kind=storable(data.get("kind", ""))[:16], format=storable(data.get("format", ""))[:32],
                      size_bytes=number("size_bytes"), time=datetime.fromtimestamp(time, tz=UTC), **common)


def alert_row(data: Mapping[str, Any], step: int, time: float, common: dict) -> RunAlert:
    """A RunAlert of an `alert` event's data (trainer.telemetry.events.AlertData); only well-formed sample ids kept."""
    listed = data.get("samples")
    samples = [{"group_id": s["group_id"], "sample_index": s["sample_index"]} for s in listed
               if isinstance(s, Mapping) and all(isinstance(s.get(k), int) for k in ("group_id", "sample_index"))
               ] if isinstance(listed, list) else []
    return RunAlert(step=step, time=datetime.fromtimestamp(time, tz=UTC), kind=storable(data.get("kind", ""))[:32],
                    metric=storable(data.get("metric", ""))[:200], value=finite_or_none(data.get("value")),
                    threshold=finite_or_none(data.get("threshold")),
                    message=redact_credentials(storable(data.get("message", ""))), samples=samples, **common)


def storable(text: Any) -> str:
    """`text` as a database string: PostgreSQL's text and jsonb refuse NUL, which a byte-level tokenizer
    decodes from a random model's output (one such sample used to stop ingest of the run for good)."""
    return str(text).replace("\x00", "\ufffd")


def rollout_row(sample: Mapping[str, Any], index: int, step: int, time: float, common: dict) -> RolloutSample:
    def count(name: str) -> int:
        return int(sample.get(name) or 0)

    group = sample.get("group_id")
    tokens = sample.get("tokens")
    turns = sample.get("turns")
    success = sample.get("success")
    num_turns = sample.get("num_turns")
    prompt = storable(sample.get("prompt", ""))
    trainer, engine = sample.get("token_logprobs_trainer"), sample.get("token_logprobs")
    mismatch_mean, mismatch_max = mismatch_summary(token_mismatch(trainer, engine), sample.get("token_mask"))
    return RolloutSample(
        step=step,
        group_id=int(group) if group is not None else index,
        sample_index=int(sample.get("sample_index", index)),
        prompt=prompt,
        prompt_hash=prompt_hash(prompt),
        response=storable(sample.get("response", "")),
        reward=finite_or_none(sample.get("reward")),
        advantage=finite_or_none(sample.get("advantage")),
        prompt_length=count("prompt_length"),
        response_length=count("response_length"),
        stop_reason=storable(sample.get("stop_reason") or "")[:32],
        tokens=[storable(t) for t in tokens] if isinstance(tokens, list) else tokens,
        token_logprobs=engine,
        token_logprobs_trainer=trainer,
        logprob_mismatch_mean=mismatch_mean,
        logprob_mismatch_max=mismatch_max,
        token_advantages=sample.get("token_advantages"),
        token_mask=sample.get("token_mask"),
        turns=[storable_turn(t) for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else None,
        env_tag=storable(sample.get("env_tag") or "")[:100],
        success=bool(success) if success is not None else None,
        num_turns=max(0, int(num_turns)) if isinstance(num_turns, int | float) else None,
        done_reason=storable(sample.get("done_reason") or "")[:32],
        render_path=storable(sample.get("render_path") or "")[:1000],
        time=time,
        **common,
    )


def storable_turn(turn: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory turn with its texts made storable (the rest are numbers, booleans and short words)."""
    return {key: storable(value) if isinstance(value, str) else value for key, value in turn.items()}


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
    if connection.vendor == "postgresql":
        copy_upsert(model, rows, columns, conflict, updates)
        return
    sqlite_upsert(table, rows, columns, conflict, updates)


def sqlite_upsert(table: str, rows: list[tuple], columns: list[str], conflict: str, updates: str) -> None:
    """SQLite: multi-row INSERT … ON CONFLICT statements of up to 5,000 rows, straight on sqlite3's connection
    (in the caller's transaction). Through Django's cursor a point cost ~2.5x the CPU (bench/ingest.py: 8 vs
    3 µs): it rewrites each statement's thousand `%s` to `?` and caps a statement at 999 parameters, the limit
    of SQLite before 3.32. Errors are still Django's (the caller retries OperationalError)."""
    connection.ensure_connection()
    raw = connection.connection
    per_statement = max(1, min(5000, raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(columns)))
    row_sql = f"({', '.join(['?'] * len(columns))})"

    def statement(n: int) -> str:
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row_sql] * n)} "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {updates} WHERE excluded.seq >= {table}.seq"
        )

    full = statement(per_statement)
    with connection.wrap_database_errors:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            raw.execute(full if len(chunk) == per_statement else statement(len(chunk)), [v for row in chunk for v in row])


def copy_upsert(model: type[Model], rows: list[tuple], columns: list[str], conflict: str, updates: str) -> None:
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


def drop_stale(rows: dict, model: type[Model], run_id: int, key_fields: tuple[str, ...], min_seq: int) -> list:
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
    update_summaries(run_id, list(batch.metrics.values()))
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
            "prompt", "prompt_hash", "response", "reward", "advantage", "prompt_length", "response_length",
            "stop_reason", "tokens", "token_logprobs", "token_logprobs_trainer", "logprob_mismatch_mean",
            "logprob_mismatch_max", "token_advantages", "token_mask", "turns", "env_tag", "success",
            "num_turns", "done_reason", "render_path", "attempt", "seq", "time",
        ],
    )
    Checkpoint.objects.bulk_create(
        list(batch.checkpoints.values()),
        update_conflicts=True,
        unique_fields=["run", "step"],
        update_fields=["path", "size_bytes", "contents", "attempt", "seq", "created_at", "deleted_at"],
    )
    LogLine.objects.bulk_create(batch.logs, batch_size=2000, ignore_conflicts=True)
    store_attempt_facts(run_id, batch.attempt_facts)
    store_stalls(run_id, batch.stall_events)
    store_profiles(run_id, batch.profiles, cursor)
    RunAlert.objects.bulk_create(batch.alerts, ignore_conflicts=True)  # keyed by seq: a replay adds nothing
    if batch.checkpoints:
        mirror_retention(run_id)
    for event in batch.status_events:
        if event["seq"] > cursor.last_seq:  # a replayed status is history, not news
            apply_status(run_id, event)


def store_profiles(run_id: int, profiles: dict[tuple[str], RunProfile], cursor: IngestCursor) -> None:
    """One row per profiler file (its path): a replayed older event never overwrites a newer attempt's row."""
    min_seq = min([row.seq for row in profiles.values()] + [cursor.last_seq + 1])
    rows = (drop_stale(profiles, RunProfile, run_id, ("path",), min_seq) if min_seq <= cursor.last_seq
            else list(profiles.values()))
    RunProfile.objects.bulk_create(rows, update_conflicts=True, unique_fields=["run", "path"],
                                   update_fields=["step", "role", "rank", "call", "kind", "format", "size_bytes",
                                                  "attempt", "seq", "time"])


SUMMARY_FIELDS = ["points", "last_step", "last_value", "min_value", "max_value", "first_time"]


def update_summaries(run_id: int, rows: list[tuple]) -> None:
    """Fold this batch's metric rows (POINT_COLUMNS tuples, already stored) into the run's MetricSummary rows.
    Steps after a key's last one are merged in; a batch that re-logs a step (a resumed attempt, a replay)
    recounts that key from its stored points instead, since the value it overwrote may be its min or max."""
    if not rows:
        return
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        by_key[row[1]].append(row)
    stored = {s.key: s for s in MetricSummary.objects.filter(run_id=run_id, key__in=list(by_key))}
    merged, stale = [], []
    for key, points in by_key.items():
        old = stored.get(key)
        if old is not None and min(p[2] for p in points) <= old.last_step:
            stale.append(key)
            continue
        newest = max(points, key=lambda p: p[2])
        finite = [p[3] for p in points if p[3] is not None]
        summary = old or MetricSummary(run_id=run_id, key=key, points=0, first_time=newest[4])
        summary.points += len(points)
        summary.last_step, summary.last_value = newest[2], newest[3]
        summary.min_value = min([v for v in (summary.min_value, *finite) if v is not None], default=None)
        summary.max_value = max([v for v in (summary.max_value, *finite) if v is not None], default=None)
        summary.first_time = min([summary.first_time, *(p[4] for p in points)])
        merged.append(summary)
    MetricSummary.objects.bulk_create(
        merged + recounted_summaries(run_id, stale), update_conflicts=True, unique_fields=["run", "key"],
        update_fields=SUMMARY_FIELDS,
    )


def recounted_summaries(run_id: int, keys: list[str] | None = None) -> list[MetricSummary]:
    """The MetricSummary rows of `keys` (default: every key) counted from the run's stored points."""
    points = MetricPoint.objects.filter(run_id=run_id)
    if keys is not None:
        if not keys:
            return []
        points = points.filter(key__in=keys)
    last = MetricPoint.objects.filter(run_id=run_id, key=OuterRef("key")).order_by("-step").values("value")[:1]
    grouped = points.values("key").order_by().annotate(
        points_n=Count("id"), last_step=Max("step"), min_value=Min("value"), max_value=Max("value"),
        first_time=Min("time"), last_value=Subquery(last),
    )
    return [MetricSummary(run_id=run_id, key=g["key"], points=g["points_n"], last_step=g["last_step"],
                          last_value=g["last_value"], min_value=g["min_value"], max_value=g["max_value"],
                          first_time=g["first_time"]) for g in grouped]


def recount_summaries(run_id: int) -> None:
    """Rebuild every MetricSummary of a run from its points (points written by something other than ingest)."""
    MetricSummary.objects.bulk_create(recounted_summaries(run_id), update_conflicts=True, unique_fields=["run", "key"],
                                      update_fields=SUMMARY_FIELDS)


def status_changes(run: Run, event: dict[str, Any], latest_attempt: int, resume_step: int = 0) -> dict[str, Any] | None:
    """What a trainer `status` event changes on `run` (None: nothing). Ingest can lag the trainer, so:

    - an event of an attempt older than the run's latest (or than the one whose progress is shown)
      changes nothing: attempt 1's late report must not move a run that attempt 2 is training;
    - within one attempt the step never goes back; a new attempt sets it, but never below
      `resume_step`, the step of the checkpoint it resumes from (resume_step_of): a resumed trainer
      reports step 0 while it starts, before it has loaded the checkpoint;
    - the status moves only as statuses.trainer_may_set allows (forward, to `starting` or `running`;
      never over a cancel; every end is the supervisor's verdict); a cancelling or finished run keeps
      its message and shows no ETA.
    """
    data = event["data"]
    attempt = int(event["attempt"])
    if attempt < max(latest_attempt, run.progress_attempt):
        return None
    step = max(0, int(data.get("step", event["step"])))
    step = max(step, run.current_step if attempt == run.progress_attempt else resume_step)
    changes: dict[str, Any] = {"current_step": step, "progress_attempt": attempt}
    if data.get("total_steps") is not None:
        changes["total_steps"] = int(data["total_steps"])
    if run.status in statuses.TERMINAL or run.status == statuses.CANCELLING:
        changes["eta_seconds"] = None
        return changes
    state = str(data.get("state", ""))
    reported = statuses.FROM_TRAINER_STATE.get(state)
    message = str(data.get("message") or "")
    if reported in (statuses.FAILED, statuses.CANCELLED):
        message = f"attempt {attempt} {state}: {message or 'no reason given'}"
    changes["message"] = message
    changes["eta_seconds"] = finite_or_none(data.get("eta_s"))
    if reported is not None and statuses.trainer_may_set(run.status, reported):
        changes["status"] = reported
        if run.started_at is None:
            changes["started_at"] = timezone.now()
    return changes


def apply_status(run_id: int, event: dict[str, Any]) -> None:
    """Advance the Run's progress (and status) from one `status` event: a compare-and-set on the status
    it read, tried again when the supervisor or a cancel changed the run in between."""
    for _ in range(3):
        run = Run.objects.only("status", "started_at", "current_step", "progress_attempt", "resume_from",
                               "parent_checkpoint").get(pk=run_id)
        latest_attempt = run.attempts.aggregate(latest=Max("number"))["latest"] or 0
        new_attempt = int(event["attempt"]) > run.progress_attempt
        changes = status_changes(run, event, latest_attempt, resume_step_of(run) if new_attempt else 0)
        if changes is None or write_run_state(run_id, only_if=Q(status=run.status), **changes):
            return
    log.warning("run %s: status event seq %s not applied: the run kept changing", run_id, event["seq"])


def resume_step_of(run: Run) -> int:
    """The step a new attempt of `run` starts from: the newest of its own checkpoints still on disk (a retry,
    or a resume in place, continues from it: jobs.transitions.resume_for_attempt), else the checkpoint it was
    resumed or forked from; 0 for a fresh start."""
    newest = Checkpoint.objects.filter(run=run, deleted_at__isnull=True).order_by("-step")
    own = next((c.step for c in newest.iterator() if c.resumable), None)
    if own is not None:
        return own
    if run.resume_from and run.parent_checkpoint_id is not None:
        return Checkpoint.objects.filter(pk=run.parent_checkpoint_id).values_list("step", flat=True).first() or 0
    return 0


def mirror_retention(run_id: int) -> None:
    """Mark the checkpoints the trainer's retention deleted: beyond the newest `max_ckpts_to_keep`
    (-1 keeps all) by step, as trainer.checkpoint.enforce_retention does after every save."""
    run = Run.objects.select_related("experiment").only("experiment__config", "overrides").get(pk=run_id)
    keep = effective_config(run.experiment.config, run.overrides).get("max_ckpts_to_keep")
    if not isinstance(keep, int) or keep <= 0:
        return
    live = Checkpoint.objects.filter(run_id=run_id, deleted_at__isnull=True).order_by("-step")
    pruned = list(live.values_list("pk", flat=True)[keep:])
    if pruned:
        Checkpoint.objects.filter(pk__in=pruned).update(deleted_at=timezone.now())


def live_event(event: dict[str, Any], run_dir: Path | None = None) -> dict[str, Any]:
    """The event as browsers receive it: rollouts without token arrays or turns and with shortened texts;
    log lines keep their colour codes (the page renders them) and lose every other terminal escape, URL
    credentials and server paths (shown relative to `run_dir`); a checkpoint's folder relative to `run_dir`."""
    slim = {k: event[k] for k in ("type", "seq", "step", "time", "attempt")}
    data = event["data"]
    if event["type"] == "rollouts":
        data = {
            "samples": [
                {
                    **{k: v for k, v in s.items() if k not in HEAVY_SAMPLE_KEYS},
                    "prompt": str(s.get("prompt", ""))[:LIVE_TEXT_LIMIT],
                    "response": str(s.get("response", ""))[:LIVE_TEXT_LIMIT],
                    "stop_reason_text": stop_reason_words(str(s.get("stop_reason") or "")),
                }
                for s in (data.get("samples") or [])[:LIVE_SAMPLES]
            ]
        }
    elif event["type"] in ("metrics", "system"):
        data = {"values": {k: finite_or_none(v) for k, v in (data.get("values") or {}).items()}}
    elif event["type"] == "log":
        lines = data.get("lines") or []
        data = {**data, "lines": [log_colours(str(line), run_dir)
                                  for line in (lines.splitlines() if isinstance(lines, str) else lines)]}
    elif event["type"] == "checkpoint" and run_dir is not None:
        data = {**data, "path": path_in_run(str(data.get("path", "")), run_dir)}
    elif event["type"] in PAGE_RENDERED:
        # the page asks the server for the section again (paths shown relative, credentials redacted there):
        # stacks, package lists and data hashes need not cross the websocket
        data = {k: data[k] for k in ("state", "phase", "ok", "role", "kind") if k in data}
    slim["data"] = data
    return slim


def resolve_run_id(value: str | int) -> int | None:
    """The platform Run pk of a telemetry `run_id` (Run.trainer_run_id is str(pk)); None if unknown (or no
    primary key could be that large: the lookup itself would fail)."""
    text = str(value)
    if text.startswith("run-"):
        text = text[4:]
    return int(text) if text.isdecimal() and text.isascii() and len(text) <= 19 and int(text) <= INT64_MAX else None


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
        run_events, last_seq = store_or_reject(pk, run_events)
        stored[pk] = len(run_events)
        if publish:
            publish_events(pk, run_events, last_seq)
    return stored


# The database is away (a restart, a lock): the caller retries the batch later. Any other error is the
# event's own (a number no column holds, a value of the wrong type, …), and would fail at every retry.
TRANSIENT_ERRORS = (OperationalError, InterfaceError)
REJECTED_LEVEL = "rejected"
REJECTED_REASON_CHARS = 500


def store_or_reject(run_id: int, events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Store one run's events (sorted by seq); returns those stored and the run's cursor. When the batch
    cannot be stored, its events are stored one by one, and each that still fails is recorded as rejected
    on the run (reject_event) instead: a poison event must never stop ingest, for this run or any other."""
    try:
        return events, store_events(run_id, events)
    except TRANSIENT_ERRORS:
        raise
    except Exception:
        log.warning("run %s: a batch of %d events could not be stored; storing them one by one", run_id,
                    len(events), exc_info=True)
    stored = []
    for event in events:
        try:
            store_events(run_id, [event])
            stored.append(event)
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            reject_event(run_id, event, exc)
    cursor = IngestCursor.objects.filter(run_id=run_id).values_list("last_seq", flat=True).first()
    return stored, cursor or 0


def reject_event(run_id: int, event: Mapping[str, Any], error: Exception) -> None:
    """Record on the run, as a log line of level `rejected` its page shows, that `event` was not stored
    and why; move the run's cursor past it (replays and backfills skip it) and tell the run's page."""
    seq = event["seq"] if 0 < event["seq"] <= INT64_MAX else 0  # 0: no trainer event has it
    reason = storable(f"{type(error).__name__}: {error}")[:REJECTED_REASON_CHARS]
    text = f"telemetry: {event['type']} event seq {event['seq']} (step {event['step']}) was not stored: {reason}"
    log.error("run %s: %s", run_id, text)
    with transaction.atomic():
        line = LogLine(run_id=run_id, attempt=event["attempt"] if 0 < event["attempt"] < 2**31 else 0, seq=seq,
                       line_no=LogLine.objects.filter(run_id=run_id, seq=0).count() if seq == 0 else 0,
                       level=REJECTED_LEVEL, text=text, time=timezone.now().timestamp())
        LogLine.objects.bulk_create([line], ignore_conflicts=True)
        if seq:
            IngestCursor.objects.get_or_create(run_id=run_id)
            IngestCursor.objects.filter(run_id=run_id, last_seq__lt=seq).update(last_seq=seq, updated_at=timezone.now())
    publish_log_lines(run_id, [line])


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
    live = [live_event(e, run_dir_of(run_id)) for e in events]
    checkpoints = [e for e in live if e["type"] == "checkpoint"]
    if checkpoints:  # one shape of a checkpoint (issue 42): the stored row as the API and a replay show it
        steps = [int(e["data"].get("step", e["step"])) for e in checkpoints]
        rows = list(Checkpoint.objects.filter(run_id=run_id, step__in=steps))
        shown = {c.step: d for c, d in zip(rows, checkpoint_dicts(Run.objects.get(pk=run_id), rows), strict=True)}
        for e, step in zip(checkpoints, steps, strict=True):
            e["data"] = shown.get(step, e["data"])  # a row always exists once ingest stored the event
    rollouts = {e["seq"]: e for e in live if e["type"] == "rollouts"}
    if rollouts:  # one shape of a sample (issue 42): the stored row as the API and a replay show it, texts shortened
        stored: dict[int, list[RolloutSample]] = {}
        for sample in RolloutSample.objects.filter(run_id=run_id, seq__in=list(rollouts)):
            stored.setdefault(sample.seq, []).append(sample)
        for seq, rows_of in stored.items():
            rollouts[seq]["data"] = {"samples": [
                {**rollout_dict(s, tokens=False), "prompt": s.prompt[:LIVE_TEXT_LIMIT],
                 "response": s.response[:LIVE_TEXT_LIMIT]} for s in rows_of[:LIVE_SAMPLES]
            ]}
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
