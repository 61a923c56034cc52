"""Writes of the tracking app that come from users (ingest writes the telemetry itself)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from policylab.experiments.models import Run
from policylab.tracking.models import ChartPin
from policylab.tracking.selectors import MetricColumn, pinned_keys


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
