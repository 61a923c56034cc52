"""Writes of the tracking app that come from users, and the driver output the supervisor hands over (ingest
writes the telemetry itself)."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import transaction

from policylab.experiments.models import Run
from policylab.redaction import redact_credentials
from policylab.tracking.broadcast import publish_log_lines
from policylab.tracking.ingest import storable
from policylab.tracking.models import ChartPin, LogLine
from policylab.tracking.selectors import MetricColumn, pinned_keys

# LogLine rows from the Ray driver's output use seq = -attempt: trainer events have seq >= 1, so
# the two never collide, and (run, seq, line_no) stays unique and idempotent across takeovers.
DRIVER_LOG_LEVEL = "driver"


def set_chart_pin(user: Any, *, key: str, pinned: bool) -> list[str]:
    """Pin or unpin the chart of metric `key` for `user` (idempotent); returns every key the user pinned."""
    if pinned:
        ChartPin.objects.get_or_create(user=user, key=key)
    else:
        ChartPin.objects.filter(user=user, key=key).delete()
    return pinned_keys(user)


def history_csv_header(columns: Sequence[MetricColumn]) -> list[str]:
    """The history table's columns, one CSV column each (a metric column's last and best values apart)."""
    metric = [name for c in columns for name in (f"{c.key} (last)", f"{c.key} ({c.goal})")]
    return ["run", "experiment", "status", "step", "total_steps", "duration_s", "created", "project", "tags", *metric]


def history_csv_rows(runs: Iterable[Run], columns: Sequence[MetricColumn]) -> Iterator[list[Any]]:
    """The header, then one row per run of `runs` (selectors.HistoryQuery.runs: filtered, annotated with the
    metric columns and ordered as the table is), exact values where the table rounds them."""
    yield history_csv_header(columns)
    if hasattr(runs, "select_related"):
        runs = runs.select_related("experiment__project").iterator(chunk_size=500)
    for run in runs:
        duration = run.duration.total_seconds() if run.duration is not None else None
        metrics = [getattr(run, f"metric_{i}_{part}") for i in range(len(columns)) for part in ("last", "best")]
        yield [run.pk, run.experiment.name, run.status, run.current_step, run.total_steps,
               None if duration is None else round(max(duration, 0.0), 3), run.created_at.isoformat(),
               run.experiment.project.name, ",".join(str(t) for t in run.experiment.tags or ()), *metrics]


def csv_lines(rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """`rows` as CSV text, a line at a time (for a streamed response); None is an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()


def save_driver_lines(run: Run, *, attempt: int, first_line_no: int, lines: Sequence[str]) -> None:
    """Store `lines`, line `first_line_no` onwards of an attempt's Ray driver output (the supervisor's log tail),
    as LogLine rows, credentials redacted; a line already stored is kept as it is. Once the surrounding
    transaction commits, the lines from `first_line_no` on are sent to the run's pages (its live log tail)."""
    now = time.time()
    LogLine.objects.bulk_create(
        [
            LogLine(run=run, attempt=attempt, seq=-attempt, line_no=first_line_no + i,
                    level=DRIVER_LOG_LEVEL, text=storable(redact_credentials(line)), time=now)
            for i, line in enumerate(lines)
        ],
        ignore_conflicts=True,
    )
    stored = LogLine.objects.filter(run=run, seq=-attempt, line_no__gte=first_line_no).order_by("line_no")
    transaction.on_commit(lambda: publish_log_lines(run.pk, list(stored)))
