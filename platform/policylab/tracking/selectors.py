"""Read side of tracking: every query starts from a Run scoped by accounts.scoping (via runs_for)."""

from __future__ import annotations

import json
import os
import re
import stat
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from django.db import connection
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Coalesce, Now, RowNumber
from django.urls import reverse

from policylab.experiments import statuses
from policylab.experiments.models import Run, run_dir_of
from policylab.experiments.selectors import experiments_for, runs_for
from policylab.experiments.services import CheckpointVerdict, checkpoint_verdicts
from policylab.redaction import path_in_run, shown_text
from policylab.tracking.downsampling import downsample_indices
from policylab.tracking.models import (
    AttemptRecord,
    ChartPin,
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
from policylab.tracking.rollout_facts import PROMPT_HASH, prompt_hash, token_mismatch

X_AXES = ("step", "time")
DEFAULT_MAX_POINTS = 1000
SNAPSHOT_MAX_POINTS = 500  # per key, on connect; the API serves more on demand
LOG_TAIL = 200
FRAMES_LIMIT = 2 << 20  # a trajectory's text frames are a few KB
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


LIVE_FIELDS = ("status", "current_step", "total_steps", "eta_seconds", "message", "cancel_requested", "state_version")


def run_state(run: Run) -> dict[str, Any]:
    """The run's live state as pages and script clients receive it: `version` grows with every write
    (experiments.run_state), so a client keeps the highest it has seen; the flags say which actions the
    state allows, so no client keeps its own list of statuses."""
    return {
        "id": run.pk,
        "status": run.status,
        "step": run.current_step,
        "total_steps": run.total_steps,
        "eta_s": run.eta_seconds,
        "message": run.message,
        "version": run.state_version,
        "cancel_requested": run.cancel_requested,
        "cancellable": run.status in statuses.CANCEL_FROM,
        "resumable": run.status in statuses.RESUME_FROM,
        "finished": run.status in statuses.TERMINAL,
    }


def fresh_run_state(run: Run) -> dict[str, Any]:
    run.refresh_from_db(fields=LIVE_FIELDS)
    return run_state(run)


def metric_keys(run: Run, source: str = "metrics") -> list[str]:
    """The run's metric keys (from MetricSummary: no scan of its points), or its system keys."""
    if source == "system":
        return sorted(SystemPoint.objects.filter(run=run).values_list("key", flat=True).distinct())
    return list(MetricSummary.objects.filter(run=run).order_by("key").values_list("key", flat=True))


def metric_overview(run: Run) -> list[dict[str, Any]]:
    """Every metric key of the run with its point count and latest value: what a page needs to lay out its
    charts before it asks for any series."""
    rows = MetricSummary.objects.filter(run=run).order_by("key")
    return [{"key": s.key, "points": s.points, "last_step": s.last_step, "last_value": s.last_value,
             "first_time": s.first_time} for s in rows]


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


# What the trainer's stop and done reasons mean (trainer.rollout.base.STOP_REASONS for one response,
# trainer.envs.base.DONE_REASONS for an agentic trajectory); anything else is shown as written.
STOP_REASON_WORDS = {
    "eos": "ended: the model wrote its end-of-sequence token",
    "length": "cut off: reached the response length limit",
    "stop": "ended at a stop string",
    "success": "episode solved",
    "failure": "episode failed",
    "max_steps": "cut off: the environment's step limit",
    "max_actions": "cut off: the action limit of the trajectory",
    "max_length": "cut off: the trajectory's token budget",
}


def stop_reason_words(reason: str) -> str:
    return STOP_REASON_WORDS.get(reason, reason or "not reported")


def rollout_dict(sample: RolloutSample, *, tokens: bool = True) -> dict[str, Any]:
    """A sample as the API and the pages see it; `tokens=False` leaves out the per-token arrays and turns."""
    out = {
        "id": sample.pk,
        "step": sample.step,
        "group_id": sample.group_id,
        "sample_index": sample.sample_index,
        "prompt": sample.prompt,
        "prompt_hash": sample.prompt_hash,
        "response": sample.response,
        "reward": sample.reward,
        "advantage": sample.advantage,
        "prompt_length": sample.prompt_length,
        "response_length": sample.response_length,
        "stop_reason": sample.stop_reason,
        "stop_reason_text": stop_reason_words(sample.stop_reason),
        "attempt": sample.attempt,
        "env_tag": sample.env_tag,
        "success": sample.success,
        "num_turns": sample.num_turns,
        "done_reason": sample.done_reason,
        "frames_url": reverse("tracking:rollout_frames", args=[sample.pk]) if sample.render_path else None,
        "logprob_mismatch_mean": sample.logprob_mismatch_mean,
        "logprob_mismatch_max": sample.logprob_mismatch_max,
    }
    if tokens:
        turns = [{**t, "stop_reason_text": stop_reason_words(str(t["stop_reason"]))} if t.get("stop_reason") else t
                 for t in sample.turns] if sample.turns is not None else None
        out |= {"tokens": sample.tokens, "token_logprobs": sample.token_logprobs,
                "token_logprobs_trainer": sample.token_logprobs_trainer,
                "token_logprob_mismatch": token_mismatch(sample.token_logprobs_trainer, sample.token_logprobs),
                "token_advantages": sample.token_advantages, "token_mask": sample.token_mask, "turns": turns}
    return out


def checkpoint_dict(ck: Checkpoint, verdict: CheckpointVerdict | None = None) -> dict[str, Any]:
    """A checkpoint as pages and the API list it, with what it can be used for now (`verdict`, from
    experiments.services.checkpoint_verdicts; checkpoint_dicts decides it once for many); its folder
    relative to the run directory."""
    verdict = verdict or checkpoint_verdicts(ck.run, [ck])[ck.pk]
    path = path_in_run(ck.path, run_dir_of(ck.run_id))
    return {"id": ck.pk, "step": ck.step, "path": path, "size_bytes": ck.size_bytes, "contents": ck.contents,
            "attempt": ck.attempt, "time": ck.created_at.timestamp(), "deleted": ck.deleted_at is not None,
            "on_disk": verdict.on_disk, "resumable": verdict.resumable, "offer": verdict.offer,
            "reason": verdict.reason, "fork_max_steps": verdict.fork_max_steps}


def checkpoint_dicts(run: Run, checkpoints: Iterable[Checkpoint]) -> list[dict[str, Any]]:
    rows = list(checkpoints)
    verdicts = checkpoint_verdicts(run, rows)
    return [checkpoint_dict(c, verdicts[c.pk]) for c in rows]


def latest_rollouts(run: Run, max_seq: int | None = None) -> list[dict[str, Any]]:
    rows = RolloutSample.objects.filter(run=run)
    if max_seq is not None:
        rows = rows.filter(seq__lte=max_seq)
    last_step = rows.aggregate(step=Max("step"))["step"]
    if last_step is None:
        return []
    return [rollout_dict(s, tokens=False) for s in rows.filter(step=last_step)[:LATEST_ROLLOUTS]]


def run_snapshot(run: Run, *, max_points: int = SNAPSHOT_MAX_POINTS, lazy: bool = False) -> dict[str, Any]:
    """Everything a run page draws on connect, consistent with the cursor `seq` it reports. `lazy`: no metric
    series (the page asks the downsampling API for each chart as it scrolls into view), only `metrics`, the
    key list with the latest values."""
    seq = run_cursor(run)
    # the tail in stored order: the trainer's log events and the Ray driver's output (seq < 0) interleaved
    logs = LogLine.objects.filter(run=run, seq__lte=seq).order_by("-pk")[:LOG_TAIL]
    return {
        "type": "snapshot",
        "seq": seq,
        "run": fresh_run_state(run),
        "metrics": metric_overview(run),
        "series": {} if lazy else series(run, max_points=max_points, max_seq=seq),
        "system": series(run, max_points=max_points, source="system", x="time", max_seq=seq),
        "rollouts": latest_rollouts(run, max_seq=seq),
        "checkpoints": checkpoint_dicts(run, Checkpoint.objects.filter(run=run, seq__lte=seq)),
        "logs": [log_dict(line, colours=True) for line in reversed(logs)],
    }


# ANSI escape sequences (colours, cursor moves) that Ray and loggers write into job output.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # SGR: colours, bold, reset


def log_text(text: str, run_dir: Path | None = None) -> str:
    """A log line as readers get it: without terminal colour codes, URL credentials redacted and server
    paths relative to `run_dir` (policylab.redaction)."""
    return shown_text(ANSI_ESCAPE.sub("", text), run_dir)


def log_colours(text: str, run_dir: Path | None = None) -> str:
    """A log line for the run page, which renders colours: SGR colour codes kept, every other escape
    (cursor moves, titles) removed; redacted as log_text."""
    return shown_text(ANSI_ESCAPE.sub(lambda m: m.group(0) if ANSI_COLOUR.fullmatch(m.group(0)) else "", text), run_dir)


def log_dict(line: LogLine, *, colours: bool = False) -> dict[str, Any]:
    """A stored log line; `colours` keeps its SGR colour codes (the run page), else they are stripped."""
    run_dir = run_dir_of(line.run_id)
    return {"id": line.pk, "seq": line.seq, "line_no": line.line_no, "attempt": line.attempt, "level": line.level,
            "text": log_colours(line.text, run_dir) if colours else log_text(line.text, run_dir), "time": line.time}


def log_lines(run: Run, *, after: int | None = None) -> QuerySet[LogLine]:
    """The run's log in the order it was stored (trainer events and the Ray driver's output interleaved);
    `after` is the id of the last line a tailing client has."""
    rows = LogLine.objects.filter(run=run)
    if after is not None:
        rows = rows.filter(pk__gt=after)
    return rows.order_by("pk")


def stored_seqs(run: Run, after: int, limit: int) -> list[int]:
    """The first `limit` event seqs above `after` that left rows (status events leave none: their effect
    is the run's state)."""
    found: set[int] = set()
    for model in (MetricPoint, SystemPoint, RolloutSample, Checkpoint, LogLine):
        rows = model.objects.filter(run=run, seq__gt=after).order_by("seq").values_list("seq", flat=True).distinct()
        found.update(rows[:limit])
    found.update(e["seq"] for e in section_events(run, after, limit=limit))
    return sorted(found)[:limit]


def section_events(run: Run, after: int, upto: int | None = None, *, limit: int | None = None) -> list[dict[str, Any]]:
    """The stored events with after < seq <= upto whose run-page section the server renders (ingest.PAGE_RENDERED)
    and that left rows: health alerts, and stalls both when reported (`stalled`) and when their phase ended
    (`recovered`, the seq stored on the stall it closed). Their data is what ingest.live_event sends live (the page
    fetches the section again), so the websocket's replay and the events API give a page that connected late the
    same events it would have got live. `limit`: at most that many of each kind, the first by seq."""
    def rows(model: type[RunAlert] | type[RunStall], seq_field: str, *fields: str) -> Iterable[tuple]:
        window: dict[str, Any] = {"run": run, f"{seq_field}__gt": after}
        if upto is not None:
            window[f"{seq_field}__lte"] = upto
        found = model.objects.filter(**window).order_by(seq_field).values_list(seq_field, *fields)
        return found[:limit] if limit is not None else found

    def shape(kind: str, seq: int, step: int, time: datetime, attempt: int, data: dict[str, Any]) -> dict[str, Any]:
        return {"type": kind, "seq": seq, "step": step, "time": time.timestamp(), "attempt": attempt, "data": data}

    found = [shape("alert", seq, step, time, attempt, {"kind": kind})
             for seq, step, time, attempt, kind in rows(RunAlert, "seq", "step", "time", "attempt", "kind")]
    found += [shape("stall", seq, step, time, attempt, {"state": "stalled", "phase": phase})
              for seq, step, time, attempt, phase in rows(RunStall, "seq", "step", "time", "attempt", "phase")]
    found += [shape("stall", seq, step or 0, time, attempt, {"state": "recovered", "phase": phase})
              for seq, step, time, attempt, phase in rows(RunStall, "recovered_seq", "recovered_step",
                                                          "recovered_time", "attempt", "phase")]
    return found


def events_page(run: Run, *, after: int, limit: int) -> dict[str, Any]:
    """Up to `limit` stored events with seq > `after`, rebuilt from their rows (as the websocket replays
    them), and the cursor to ask for next (`next_after`, null when nothing follows yet)."""
    seqs = stored_seqs(run, after, limit)
    events = rebuild_events(run, after, seqs[-1]) if seqs else []
    return {"run": fresh_run_state(run), "seq": run_cursor(run), "events": events,
            "next_after": seqs[-1] if seqs else None}


def metrics_table(run: Run) -> tuple[list[str], list[list[Any]]]:
    """Every metric point of the run, full resolution, one row per step: (["step", key, …], rows)."""
    by_step: dict[int, dict[str, Any]] = defaultdict(dict)
    points = MetricPoint.objects.filter(run=run).order_by("step").values_list("step", "key", "value")
    for step, key, value in points.iterator(chunk_size=20_000):
        by_step[step][key] = value
    keys = sorted({key for values in by_step.values() for key in values})
    return ["step", *keys], [[step, *(by_step[step].get(key) for key in keys)] for step in sorted(by_step)]


def events_after(run: Run, after_seq: int) -> dict[str, Any] | None:
    """The stored events with seq > after_seq, rebuilt from the rows, as one `replay` message.

    None when the client is too far behind (REPLAY_ROW_LIMIT): it gets a snapshot instead.
    """
    seq = run_cursor(run)
    if MetricPoint.objects.filter(run=run, seq__gt=after_seq, seq__lte=seq).count() > REPLAY_ROW_LIMIT:
        return None
    return {"type": "replay", "seq": seq, "run": fresh_run_state(run), "events": rebuild_events(run, after_seq, seq)}


def rebuild_events(run: Run, after_seq: int, upto_seq: int) -> list[dict[str, Any]]:
    """The events with after_seq < seq <= upto_seq, rebuilt from the rows they wrote, in seq order."""
    window = {"run": run, "seq__gt": after_seq, "seq__lte": upto_seq}
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
    saved = list(Checkpoint.objects.filter(**window))
    for ck, shown in zip(saved, checkpoint_dicts(run, saved), strict=True):
        event("checkpoint", ck.seq, ck.step, ck.created_at.timestamp(), ck.attempt)["data"] = shown
    for line in LogLine.objects.filter(**window):
        data = event("log", line.seq, 0, line.time, line.attempt)["data"]
        data["level"] = line.level
        data.setdefault("lines", []).append(log_text(line.text, run.run_dir))
    for shown in section_events(run, after_seq, upto_seq):  # alerts and stalls, as sent live
        events[(shown["type"], shown["seq"])] = shown
    return sorted(events.values(), key=lambda e: e["seq"])


# The inspector's orders: field, and the tie-breaks that keep a GRPO group's samples together.
ROLLOUT_SORTS = {
    "step": ("step", "group_id", "sample_index"),
    "reward": ("reward", "step", "group_id", "sample_index"),
    "advantage": ("advantage", "step", "group_id", "sample_index"),
    "length": ("response_length", "step", "group_id", "sample_index"),
    "turns": ("num_turns", "step", "group_id", "sample_index"),
}
SORT_CHOICES = tuple(f"{sign}{name}" for name in ROLLOUT_SORTS for sign in ("", "-"))


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
    env_tag: str | None = None
    success: bool | None = None
    turns_min: int | None = None
    turns_max: int | None = None
    latest: bool = False  # only the newest step that has samples (step_min and step_max are then ignored)
    sort: str = "step"


ROLLOUT_FTS = "tracking_rolloutsample_fts"  # tracking migration 0009 (SQLite)
MIN_INDEXED_CHARS = 3  # a trigram: shorter text uses neither index


def sqlite_search_index() -> bool:
    """True when this SQLite database has the rollout search's FTS5 table (its SQLite has the trigram tokenizer)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [ROLLOUT_FTS])
        return cursor.fetchone() is not None


def rollout_text_filter(q: str) -> Q:
    """Samples whose prompt or response contains `q`, ignoring case, found through the search index
    (docs/decisions/0048-rollout-search-index.md): on PostgreSQL the `icontains` comparison itself uses the
    trigram indexes on UPPER(prompt) / UPPER(response); on SQLite the FTS5 trigram table answers alone (a
    phrase of trigrams is an exact substring match, case folded as in Unicode), so no sample row is read to
    count the matches. Text shorter than a trigram is scanned with `icontains` on both."""
    if connection.vendor != "sqlite" or len(q) < MIN_INDEXED_CHARS or not sqlite_search_index():
        return Q(prompt__icontains=q) | Q(response__icontains=q)
    phrase = '"' + q.replace('"', '""') + '"'  # one FTS5 string: every character literal
    return Q(pk__in=RawSQL(f"SELECT rowid FROM {ROLLOUT_FTS} WHERE {ROLLOUT_FTS} MATCH %s", [phrase]))


def rollouts_matching(run: Run, filters: RolloutFilters) -> QuerySet[RolloutSample]:
    """The run's samples that pass every filter; `q` is plain text found in the prompt or the response,
    ignoring case (rollout_text_filter: an index lookup from three characters on). Never a user's
    regular expression: backtracking on `.*.*…Z` costs hours (issue 34). Callers bound the query's time
    (policylab.query_budget)."""
    rows = RolloutSample.objects.filter(run=run)
    step_min, step_max = filters.step_min, filters.step_max
    if filters.latest:
        step_min = step_max = rows.aggregate(step=Max("step"))["step"]
        if step_min is None:
            return rows.none()
    bounds = {
        "step__gte": step_min, "step__lte": step_max,
        "reward__gte": filters.reward_min, "reward__lte": filters.reward_max,
        "response_length__gte": filters.len_min, "response_length__lte": filters.len_max,
        "num_turns__gte": filters.turns_min, "num_turns__lte": filters.turns_max,
        "success": filters.success,
    }
    rows = rows.filter(**{k: v for k, v in bounds.items() if v is not None})
    if filters.stop_reason:
        rows = rows.filter(stop_reason=filters.stop_reason)
    if filters.env_tag:
        rows = rows.filter(env_tag=filters.env_tag)
    if filters.q:
        rows = rows.filter(rollout_text_filter(filters.q))
    descending = filters.sort.startswith("-")
    fields = ROLLOUT_SORTS[filters.sort.lstrip("-")]
    first = F(fields[0]).desc(nulls_last=True) if descending else F(fields[0]).asc(nulls_last=True)
    return rows.order_by(first, *fields[1:])


# The prompt history (decision 0035): steps as rows, runs as columns, a page of steps at a time and at most
# HISTORY_CELL_SAMPLES responses per (run, step) cell, without the per-token arrays (one sample's come on demand).
HISTORY_CELL_SAMPLES = 16
HEAVY_FIELDS = ("tokens", "token_logprobs", "token_logprobs_trainer", "token_advantages", "token_mask", "turns")


def find_prompt(runs: Sequence[Run], prompt: str) -> tuple[str, str] | None:
    """(hash, text) of the prompt that `prompt` names in any of `runs` (already scoped): its hash (as the
    inspector's links give it) or its exact text; None when no sample of theirs has it."""
    candidates = [prompt] if PROMPT_HASH.fullmatch(prompt) else []
    candidates.append(prompt_hash(prompt))
    for candidate in candidates:
        # no ORDER BY (first() would add one by id): the (run, prompt_hash, step) index answers it at once
        texts = RolloutSample.objects.filter(run__in=runs, prompt_hash=candidate).order_by()
        for text in texts.values_list("prompt", flat=True)[:1]:
            return candidate, text
    return None


def prompt_steps(runs: Sequence[Run], key: str) -> QuerySet:
    """The steps at which any of `runs` logged a sample of the prompt hashed `key`, in order (a query to page:
    the index on run, prompt hash and step answers it)."""
    rows = RolloutSample.objects.filter(run__in=runs, prompt_hash=key)
    return rows.order_by("step").values_list("step", flat=True).distinct()


def prompt_run_totals(runs: Sequence[Run], key: str) -> list[dict[str, Any]]:
    """Each run with how many steps and samples of the prompt it logged, in the order of `runs`."""
    totals = {row["run_id"]: row for row in RolloutSample.objects.filter(run__in=runs, prompt_hash=key)
              .order_by().values("run_id").annotate(steps=Count("step", distinct=True), samples=Count("id"))}
    return [{"id": run.pk, "name": run.experiment.name, "status": run.status,
             "steps": totals.get(run.pk, {}).get("steps", 0), "samples": totals.get(run.pk, {}).get("samples", 0),
             "inspector_url": reverse("tracking:rollouts", args=[run.pk])} for run in runs]


def prompt_history(runs: Sequence[Run], key: str, steps: Sequence[int]) -> list[dict[str, Any]]:
    """One row per step of `steps`: for each run of `runs` (a column), its samples of the prompt hashed `key`
    at that step (the first HISTORY_CELL_SAMPLES by group and sample, without prompt text or token arrays)
    and how many it logged. Two queries, whatever the page holds."""
    rows = RolloutSample.objects.filter(run__in=runs, prompt_hash=key, step__in=list(steps))
    counts = {(r["run_id"], r["step"]): r["n"]
              for r in rows.order_by().values("run_id", "step").annotate(n=Count("id"))}
    ranked = rows.annotate(rank=Window(RowNumber(), partition_by=[F("run_id"), F("step")],
                                       order_by=[F("group_id").asc(), F("sample_index").asc()]))
    cells: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for sample in ranked.filter(rank__lte=HISTORY_CELL_SAMPLES).defer("prompt", *HEAVY_FIELDS).order_by(
            "step", "run_id", "group_id", "sample_index"):
        cells[(sample.run_id, sample.step)].append(history_sample_dict(sample))
    return [{"step": step, "cells": [{"run": run.pk, "count": counts.get((run.pk, step), 0),
                                      "samples": cells.get((run.pk, step), [])} for run in runs]}
            for step in steps]


def history_sample_dict(sample: RolloutSample) -> dict[str, Any]:
    """A sample in a history cell: what rollout_dict shows but the prompt (the row's) and the token arrays."""
    return {"id": sample.pk, "step": sample.step, "group_id": sample.group_id, "sample_index": sample.sample_index,
            "response": sample.response, "reward": sample.reward, "advantage": sample.advantage,
            "response_length": sample.response_length, "stop_reason": sample.stop_reason,
            "stop_reason_text": stop_reason_words(sample.stop_reason), "attempt": sample.attempt,
            "logprob_mismatch_mean": sample.logprob_mismatch_mean,
            "logprob_mismatch_max": sample.logprob_mismatch_max,
            "url": reverse("tracking:api-rollout-sample", args=[sample.pk])}


def rollout_sample(user: Any, sample_id: int) -> RolloutSample | None:
    """One sample, with its token arrays, of a run `user` may see; None otherwise (another team's is absent)."""
    return RolloutSample.objects.filter(pk=sample_id, run__in=runs_for(user)).first()


def rollout_steps(run: Run) -> list[int]:
    return list(RolloutSample.objects.filter(run=run).values_list("step", flat=True).distinct().order_by("step"))


def stop_reasons(run: Run) -> list[str]:
    return list(RolloutSample.objects.filter(run=run).order_by("stop_reason").values_list("stop_reason", flat=True).distinct())


def env_tags(run: Run) -> list[str]:
    """The environment tags of the run's agentic trajectories ([] for RLVR runs)."""
    rows = RolloutSample.objects.filter(run=run).exclude(env_tag="")
    return list(rows.order_by("env_tag").values_list("env_tag", flat=True).distinct())


def rollout_frames(user: Any, sample_id: int) -> str | None:
    """The text frames of a trajectory of one of the user's runs (its `render_path`), when that file lies inside
    the run's own directory (symlinks resolved); None otherwise: a path is never trusted because a sample names it."""
    sample = (RolloutSample.objects.filter(pk=sample_id, run__in=runs_for(user)).exclude(render_path="")
              .select_related("run").first())
    if sample is None:
        return None
    root = sample.run.run_dir.resolve()
    try:
        path = Path(sample.render_path).resolve()
        if not path.is_relative_to(root) or not path.is_file() or path.stat().st_size > FRAMES_LIMIT:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class MetricColumn:
    """A history column: a metric's last value and its best (`goal` max or min) over the run."""

    key: str
    goal: str = "max"

    @classmethod
    def parse(cls, text: str) -> MetricColumn:
        """"reward/mean" (best = max), "actor/pg_loss:min" (best = min) or "…:max"."""
        text = text.strip()
        for goal in ("max", "min"):
            if text.endswith(f":{goal}"):
                return cls(text[: -len(goal) - 1], goal)
        return cls(text)

    @property
    def spec(self) -> str:
        return self.key if self.goal == "max" else f"{self.key}:min"


HISTORY_SORTS = ("created", "duration", "step", "status", "experiment")
MAX_METRIC_COLUMNS = 6


@dataclass(frozen=True)
class HistoryQuery:
    """What the history table shows, as its URL says it (`q`, `tag`, `status`, `metrics`, `sort`): the page and
    its CSV download read the same parameters, so the download is the table the user is looking at."""

    search: str = ""
    tag: str = ""
    status: str = ""
    columns: tuple[MetricColumn, ...] = ()
    sort: str = "-created"

    @classmethod
    def from_params(cls, params: Any) -> HistoryQuery:
        columns = [MetricColumn.parse(text) for text in params.get("metrics", "").split(",")]
        return cls(
            search=params.get("q", "").strip(), tag=params.get("tag", "").strip(),
            status=params.get("status", "").strip(), sort=params.get("sort", "-created").strip(),
            columns=tuple(c for c in columns if c.key)[:MAX_METRIC_COLUMNS],
        )

    def runs(self, user: Any) -> QuerySet[Run]:
        return history_runs(user, search=self.search, tag=self.tag, status=self.status, columns=self.columns,
                            sort=self.sort)


def history_runs(user: Any, *, search: str = "", tag: str = "", status: str = "",
                 columns: Sequence[MetricColumn] = (), sort: str = "-created") -> QuerySet[Run]:
    """The team's runs filtered by a free-text search (experiment name, description, project, tags, run
    message), a tag and a status; annotated with `duration`, `alert_count` and, per metric column i, `metric_<i>_last` and
    `metric_<i>_best`; ordered by `sort`: a HISTORY_SORTS name or `m<i>.last` / `m<i>.best`, `-` first for
    descending (missing values last either way)."""
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
    runs = runs.annotate(duration=ExpressionWrapper(Coalesce("finished_at", Now()) - F("started_at"),
                                                    output_field=DurationField()))
    alerts = RunAlert.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(n=Count("pk")).values("n")
    runs = runs.annotate(alert_count=Subquery(alerts[:1]))  # the health alerts; None: none
    for i, column in enumerate(columns):
        summary = MetricSummary.objects.filter(run=OuterRef("pk"), key=column.key)
        best = "max_value" if column.goal == "max" else "min_value"
        runs = runs.annotate(**{f"metric_{i}_last": Subquery(summary.values("last_value")[:1]),
                                f"metric_{i}_best": Subquery(summary.values(best)[:1])})
    return runs.order_by(*history_order(sort, len(columns)))


def history_order(sort: str, n_columns: int) -> list[Any]:
    """The ORDER BY of a history `sort` value; anything unknown is newest first."""
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    fields = {"created": "created_at", "duration": "duration", "step": "current_step", "status": "status",
              "experiment": "experiment__name"}
    for i in range(n_columns):
        fields |= {f"m{i}.last": f"metric_{i}_last", f"m{i}.best": f"metric_{i}_best"}
    if name not in fields:
        return ["-created_at", "-pk"]
    field = F(fields[name])
    return [field.desc(nulls_last=True) if descending else field.asc(nulls_last=True), "-pk"]


def team_metric_keys(user: Any, limit: int = 500) -> list[str]:
    """Metric keys the team's runs have logged (for choosing history columns and compare charts)."""
    keys = MetricSummary.objects.filter(run__in=runs_for(user)).values_list("key", flat=True).distinct()
    return sorted(keys.order_by("key")[:limit])


def team_tags(user: Any) -> list[str]:
    tags: set[str] = set()
    for values in experiments_for(user).values_list("tags", flat=True):
        tags.update(str(t) for t in values or ())
    return sorted(tags)


def pinned_keys(user: Any) -> list[str]:
    """The metric charts `user` pinned, oldest first."""
    return list(ChartPin.objects.filter(user=user).values_list("key", flat=True))


def shown_json(value: Any, run_dir: Path) -> Any:
    """A stored JSON value as pages and the API show it: a path relative to the run directory (path_in_run),
    any other string through shown_text (server paths hidden, credentials redacted)."""
    if isinstance(value, str):
        is_path = value.startswith("/") and not any(c.isspace() for c in value)
        return path_in_run(value, run_dir) if is_path else shown_text(value, run_dir)
    if isinstance(value, dict):
        return {k: shown_json(v, run_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [shown_json(v, run_dir) for v in value]
    return value


def attempt_records(run: Run) -> list[dict[str, Any]]:
    """Each attempt's fingerprint and resume report (None where the trainer sent none), newest first, as shown."""
    return [{"attempt": r.attempt, "fingerprint": shown_json(r.fingerprint, run.run_dir),
             "resume": shown_json(r.resume, run.run_dir)}
            for r in AttemptRecord.objects.filter(run=run).order_by("-attempt")]


def latest_fingerprints(runs: Sequence[Run]) -> list[dict[str, Any] | None]:
    """The newest attempt's fingerprint of each run (already scoped), in order; None for a run without one."""
    newest: dict[int, dict[str, Any]] = {}
    records = AttemptRecord.objects.filter(run__in=runs, fingerprint__isnull=False).order_by("run", "attempt")
    for run_id, fingerprint in records.values_list("run_id", "fingerprint"):
        newest[run_id] = fingerprint
    return [shown_json(newest[r.pk], r.run_dir) if r.pk in newest else None for r in runs]


def duration_text(seconds: float) -> str:
    """A duration to a tenth of a second, or in ms below a second (a sub-second phase is not "0.0 s")."""
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.1f} s"


def stall_ending(stall: RunStall, *, is_open: bool, attempts: dict[int, str], run_status: str) -> tuple[str, str]:
    """How a stall ended, as (kind, text): `recovered` (the phase ended by itself), `restarted` (on_stall ended
    the attempt and a later attempt resumed from the latest checkpoint), `failed` (on_stall: fail ended the run),
    `attempt-ended` (the attempt ended, by a cancel or an error, while the phase was still running), or `open`."""
    if stall.recovered_after_s is not None:
        return "recovered", f"recovered: the phase ended by itself after {duration_text(stall.recovered_after_s)}"
    if is_open:
        return "open", ""
    later = sorted(n for n in attempts if n > stall.attempt)
    if stall.on_stall == "restart_from_checkpoint":
        if later:
            return "restarted", (f"the watchdog ended attempt {stall.attempt}; attempt {later[0]} restarted from the "
                                 "latest checkpoint")
        return "restarted", f"the watchdog ended attempt {stall.attempt} to restart from the latest checkpoint"
    if stall.on_stall == "fail":
        return "failed", f"the watchdog ended attempt {stall.attempt} without a retry (on_stall: fail)"
    status = run_status if not later else attempts.get(stall.attempt, "")
    return "attempt-ended", (f"the attempt ended{f' ({status})' if status else ''} while the phase was still "
                             "running")


def stalled_now(run: Run) -> bool:
    """Whether the run is stalled now: it is still active and its latest attempt has a stall whose phase has not
    ended (the `open` of run_stalls). Its status stays `running` (decision 0034); the page and the API's
    `status_display` say `stalled`."""
    if run.status not in statuses.ACTIVE:
        return False
    latest = run.attempts.aggregate(latest=Max("number"))["latest"]
    return latest is not None and RunStall.objects.filter(run=run, attempt=latest,
                                                          recovered_after_s__isnull=True).exists()


def run_stalls(run: Run) -> list[dict[str, Any]]:
    """The run's stalls, newest first, as shown (stacks and summaries through shown_text); `open` marks a
    stall of the run's latest attempt whose phase had not ended, while the run is still active; `ended` and
    `ended_text` say how each ended (stall_ending)."""
    attempts = dict(run.attempts.values_list("number", "status"))
    latest = max(attempts, default=None)
    active = run.status in statuses.ACTIVE
    rows = []
    for s in RunStall.objects.filter(run=run).order_by("-seq"):
        is_open = active and s.attempt == latest and s.recovered_after_s is None
        ended, ended_text = stall_ending(s, is_open=is_open, attempts=attempts, run_status=run.status)
        rows.append({"attempt": s.attempt, "seq": s.seq, "time": s.time, "phase": s.phase,
                     "summary": shown_text(s.summary, run.run_dir), "elapsed_s": s.elapsed_s, "bound_s": s.bound_s,
                     "on_stall": s.on_stall, "waiting": s.waiting, "stacks": shown_text(s.stacks, run.run_dir),
                     "file": s.file, "recovered_after_s": s.recovered_after_s, "open": is_open,
                     "ended": ended, "ended_text": ended_text})
    return rows


INSPECTOR_PAGE_SIZE = 50  # samples per inspector page (frontend/static/tracking/rollouts.js's PAGE_SIZE)


def alert_inspector_url(run: Run, alert: RunAlert) -> str:
    """The rollout inspector at the alert's step; for an alert that names samples, with them `flagged` (step.group.
    index, highlighted and scrolled into view there) and on the page (in the step's group order) that holds the
    first of them."""
    url = f"{reverse('tracking:rollouts', args=[run.pk])}?step_min={alert.step}&step_max={alert.step}&step={alert.step}&latest=0"
    if not alert.samples:
        return url
    first = min((s["group_id"], s["sample_index"]) for s in alert.samples)
    before = RolloutSample.objects.filter(run=run, step=alert.step).filter(
        Q(group_id__lt=first[0]) | Q(group_id=first[0], sample_index__lt=first[1])).count()
    flagged = ",".join(f"{alert.step}.{s['group_id']}.{s['sample_index']}" for s in alert.samples)
    page = before // INSPECTOR_PAGE_SIZE + 1
    return f"{url}&flagged={flagged}" + (f"&page={page}" if page > 1 else "")


def run_alerts(run: Run) -> list[dict[str, Any]]:
    """The run's health alerts (RunAlert), newest first, each with the inspector's address at its step and samples
    (alert_inspector_url)."""
    return [{"attempt": a.attempt, "seq": a.seq, "step": a.step, "time": a.time, "kind": a.kind, "metric": a.metric,
             "value": a.value, "threshold": a.threshold, "message": shown_text(a.message, run.run_dir),
             "samples": a.samples, "inspector_url": alert_inspector_url(run, a)}
            for a in RunAlert.objects.filter(run=run).order_by("-seq")]


def run_profiles(run: Run) -> list[dict[str, Any]]:
    """The run's profiler files (RunProfile) by step, role, rank and call, as the run page lists them: the file's
    name, its folder relative to the run directory, and what it holds."""
    return [{"id": p.pk, "step": p.step, "role": p.role, "rank": p.rank, "call": p.call, "kind": p.kind,
             "format": p.format, "size_bytes": p.size_bytes, "attempt": p.attempt, "name": Path(p.path).name,
             "path": path_in_run(p.path, run.run_dir)}
            for p in RunProfile.objects.filter(run=run).order_by("step", "role", "rank", "call", "path")]


def open_profile(user: Any, run_id: int, profile_id: int) -> tuple[BinaryIO, str] | None:
    """The profiler file `profile_id` of one of the user's runs, open for reading, and its name; None when the run
    is not the user's teams', the row is not the run's, or the file is not a regular file inside the run's own
    directory (symlinks resolved): the path an event named is never trusted, and the request names none."""
    profile = (RunProfile.objects.filter(pk=profile_id, run_id=run_id, run__in=runs_for(user))
               .select_related("run").first())
    if profile is None:
        return None
    path = file_in_run(profile.path, profile.run.run_dir)
    return None if path is None else open_regular_file(path)


def file_in_run(path: str, run_dir: Path) -> Path | None:
    """`path` (relative ones taken from `run_dir`), symlinks resolved, when it lies inside `run_dir`; else None."""
    try:
        root = run_dir.resolve()
        resolved = (root / path).resolve() if path else root
    except (OSError, ValueError):
        return None
    return resolved if resolved != root and resolved.is_relative_to(root) else None


def open_regular_file(path: Path) -> tuple[BinaryIO, str] | None:
    """`path` opened without following a last-moment symlink, when it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb"), path.name
