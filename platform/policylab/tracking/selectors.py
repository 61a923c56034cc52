"""Read side of tracking: every query starts from a Run scoped by accounts.scoping (via runs_for)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Max, Q, QuerySet, TextField
from django.db.models.functions import Cast

from policylab.experiments.models import Run
from policylab.experiments.selectors import experiments_for, runs_for
from policylab.tracking.downsampling import downsample_indices
from policylab.tracking.models import (
    Checkpoint,
    IngestCursor,
    LogLine,
    MetricPoint,
    RolloutSample,
    SystemPoint,
)

X_AXES = ("step", "time")
DEFAULT_MAX_POINTS = 1000
SNAPSHOT_MAX_POINTS = 500  # per key, on connect; the API serves more on demand
LOG_TAIL = 200
LATEST_ROLLOUTS = 64
# A reconnecting client further behind than this many rows gets a fresh snapshot instead of a replay.
REPLAY_ROW_LIMIT = 10_000


def run_for_user(user: Any, run_id: int) -> Run | None:
    """The run if `user` may see it (its team), else None: other teams' runs simply do not exist."""
    return runs_for(user).filter(pk=run_id).first()


def run_cursor(run: Run) -> int:
    """The largest event seq stored for `run` (-1 when nothing was ingested yet)."""
    value = IngestCursor.objects.filter(run=run).values_list("last_seq", flat=True).first()
    return -1 if value is None else value


def run_status(run: Run) -> dict[str, Any]:
    run.refresh_from_db(fields=["status", "current_step", "total_steps", "eta_seconds", "message"])
    return {
        "id": run.pk,
        "status": run.status,
        "step": run.current_step,
        "total_steps": run.total_steps,
        "eta_s": run.eta_seconds,
        "message": run.message,
    }


def metric_keys(run: Run, source: str = "metrics") -> list[str]:
    model = SystemPoint if source == "system" else MetricPoint
    return sorted(model.objects.filter(run=run).values_list("key", flat=True).distinct())


def series(
    run: Run,
    keys: list[str] | None = None,
    *,
    max_points: int = DEFAULT_MAX_POINTS,
    x: str = "step",
    source: str = "metrics",
    max_seq: int | None = None,
) -> dict[str, dict[str, list]]:
    """{key: {"x": [...], "y": [...], "step": [...], "time": [...]}} downsampled to at most max_points per key.

    `max_seq` cuts the series at a snapshot's cursor, so live events after it are not sent twice.
    """
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}, got {x!r}")
    model = SystemPoint if source == "system" else MetricPoint
    wanted = metric_keys(run, source) if keys is None else keys
    rows = model.objects.filter(run=run, key__in=wanted)
    if max_seq is not None:
        rows = rows.filter(seq__lte=max_seq)
    order = "time" if x == "time" or source == "system" else "step"
    by_key: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
    for key, step, time, value in rows.order_by("key", order, "seq").values_list("key", "step", "time", "value").iterator(
        chunk_size=20_000
    ):
        steps, times, values = by_key[key]
        steps.append(step)
        times.append(time)
        values.append(value)
    out: dict[str, dict[str, list]] = {}
    for key, (steps, times, values) in by_key.items():
        xs = times if x == "time" else steps
        keep = downsample_indices(xs, values, max_points)
        out[key] = {
            "x": [xs[i] for i in keep],
            "y": [values[i] for i in keep],
            "step": [steps[i] for i in keep],
            "time": [times[i] for i in keep],
        }
    return out


def rollout_dict(sample: RolloutSample, *, tokens: bool = True) -> dict[str, Any]:
    out = {
        "id": sample.pk,
        "step": sample.step,
        "group_id": sample.group_id,
        "sample_index": sample.sample_index,
        "prompt": sample.prompt,
        "response": sample.response,
        "reward": sample.reward,
        "advantage": sample.advantage,
        "prompt_length": sample.prompt_length,
        "response_length": sample.response_length,
        "stop_reason": sample.stop_reason,
        "attempt": sample.attempt,
    }
    if tokens:
        out |= {"tokens": sample.tokens, "token_logprobs": sample.token_logprobs, "token_advantages": sample.token_advantages}
    return out


def checkpoint_dict(ck: Checkpoint) -> dict[str, Any]:
    return {"id": ck.pk, "step": ck.step, "path": ck.path, "size_bytes": ck.size_bytes, "contents": ck.contents,
            "attempt": ck.attempt, "time": ck.created_at.timestamp()}


def latest_rollouts(run: Run, max_seq: int | None = None) -> list[dict[str, Any]]:
    rows = RolloutSample.objects.filter(run=run)
    if max_seq is not None:
        rows = rows.filter(seq__lte=max_seq)
    last_step = rows.aggregate(step=Max("step"))["step"]
    if last_step is None:
        return []
    return [rollout_dict(s, tokens=False) for s in rows.filter(step=last_step)[:LATEST_ROLLOUTS]]


def run_snapshot(run: Run, *, max_points: int = SNAPSHOT_MAX_POINTS) -> dict[str, Any]:
    """Everything a run page draws on connect, consistent with the cursor `seq` it reports."""
    seq = run_cursor(run)
    logs = LogLine.objects.filter(run=run, seq__lte=seq).order_by("-seq", "-line_no")[:LOG_TAIL]
    return {
        "type": "snapshot",
        "seq": seq,
        "run": run_status(run),
        "series": series(run, max_points=max_points, max_seq=seq),
        "system": series(run, max_points=max_points, source="system", x="time", max_seq=seq),
        "rollouts": latest_rollouts(run, max_seq=seq),
        "checkpoints": [checkpoint_dict(c) for c in Checkpoint.objects.filter(run=run, seq__lte=seq)],
        "logs": [log_dict(line) for line in reversed(logs)],
    }


def log_dict(line: LogLine) -> dict[str, Any]:
    return {"seq": line.seq, "level": line.level, "text": line.text, "time": line.time}


def events_after(run: Run, after_seq: int) -> dict[str, Any] | None:
    """The stored events with seq > after_seq, rebuilt from the rows, as one `replay` message.

    None when the client is too far behind (REPLAY_ROW_LIMIT): it gets a snapshot instead.
    """
    seq = run_cursor(run)
    window = {"run": run, "seq__gt": after_seq, "seq__lte": seq}
    if MetricPoint.objects.filter(**window).count() > REPLAY_ROW_LIMIT:
        return None
    events: dict[tuple[str, int], dict[str, Any]] = {}

    def event(kind: str, row_seq: int, step: int, time: float, attempt: int) -> dict[str, Any]:
        return events.setdefault(
            (kind, row_seq), {"type": kind, "seq": row_seq, "step": step, "time": time, "attempt": attempt, "data": {}}
        )

    for model, kind in ((MetricPoint, "metrics"), (SystemPoint, "system")):
        for row in model.objects.filter(**window).values_list("seq", "step", "time", "attempt", "key", "value"):
            event(kind, *row[:4])["data"].setdefault("values", {})[row[4]] = row[5]
    for sample in RolloutSample.objects.filter(**window):
        event("rollouts", sample.seq, sample.step, sample.time, sample.attempt)["data"].setdefault("samples", []).append(
            rollout_dict(sample, tokens=False)
        )
    for ck in Checkpoint.objects.filter(**window):
        event("checkpoint", ck.seq, ck.step, ck.created_at.timestamp(), ck.attempt)["data"] = checkpoint_dict(ck)
    for line in LogLine.objects.filter(**window):
        data = event("log", line.seq, 0, line.time, line.attempt)["data"]
        data["level"] = line.level
        data.setdefault("lines", []).append(line.text)
    return {"type": "replay", "seq": seq, "run": run_status(run), "events": sorted(events.values(), key=lambda e: e["seq"])}


@dataclass(frozen=True)
class RolloutFilters:
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    len_min: int | None = None
    len_max: int | None = None
    stop_reason: str | None = None
    q: str | None = None


class BadPattern(ValueError):
    """A rollout search pattern that is not a valid regular expression."""


def check_pattern(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadPattern(f"not a valid regular expression: {exc}") from exc
    return pattern


def rollouts_matching(run: Run, filters: RolloutFilters) -> QuerySet[RolloutSample]:
    """The run's samples that pass every filter; `q` is a regex over prompt or response, run by the
    database (PostgreSQL's ~ operator; Python's re through Django's REGEXP function on SQLite)."""
    rows = RolloutSample.objects.filter(run=run)
    bounds = {
        "step__gte": filters.step_min, "step__lte": filters.step_max,
        "reward__gte": filters.reward_min, "reward__lte": filters.reward_max,
        "response_length__gte": filters.len_min, "response_length__lte": filters.len_max,
    }
    rows = rows.filter(**{k: v for k, v in bounds.items() if v is not None})
    if filters.stop_reason:
        rows = rows.filter(stop_reason=filters.stop_reason)
    if filters.q:
        pattern = check_pattern(filters.q)
        rows = rows.filter(Q(prompt__regex=pattern) | Q(response__regex=pattern))
    return rows.order_by("step", "group_id", "sample_index")


def rollout_steps(run: Run) -> list[int]:
    return list(RolloutSample.objects.filter(run=run).values_list("step", flat=True).distinct().order_by("step"))


def stop_reasons(run: Run) -> list[str]:
    return list(RolloutSample.objects.filter(run=run).order_by("stop_reason").values_list("stop_reason", flat=True).distinct())


def history_runs(user: Any, *, search: str = "", tag: str = "", status: str = "") -> QuerySet[Run]:
    """The team's runs, newest first, filtered by a free-text search (experiment name, description,
    project, tags, run message), a tag and a status."""
    runs = runs_for(user).annotate(tags_text=Cast("experiment__tags", TextField()))
    if search:
        matches = (
            Q(experiment__name__icontains=search)
            | Q(experiment__description__icontains=search)
            | Q(experiment__project__name__icontains=search)
            | Q(tags_text__icontains=search)
            | Q(message__icontains=search)
        )
        runs = runs.filter(matches | Q(pk=int(search)) if search.isdigit() else matches)
    if tag:
        runs = runs.filter(tags_text__contains=json.dumps(tag))
    if status:
        runs = runs.filter(status=status)
    return runs.order_by("-created_at", "-pk")


def team_tags(user: Any) -> list[str]:
    tags: set[str] = set()
    for values in experiments_for(user).values_list("tags", flat=True):
        tags.update(str(t) for t in values or ())
    return sorted(tags)
