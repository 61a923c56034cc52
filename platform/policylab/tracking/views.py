"""Pages of tracking: run dashboard, rollout inspector, history and compare. Thin: data comes from
selectors (scoped through accounts.scoping); live data comes over the websocket and the API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from policylab.accounts.scoping import can_write
from policylab.experiments import statuses
from policylab.experiments.flat_config import effective_config
from policylab.experiments.models import RunStatus
from policylab.experiments.selectors import runs_for
from policylab.ids import parse_id
from policylab.redaction import shown_config
from policylab.tracking import selectors
from policylab.tracking.compare import config_diff, environment_diff, split_none_against_absent
from policylab.tracking.panels import ASYNC_CHARTS, ASYNC_PREFIX
from policylab.tracking.services import csv_lines, history_csv_rows

MAX_COMPARED = 8
MAX_COMPARE_CHOICES = 50  # the newest runs offered to compare with (the URL's ?compare= may name any of the team's)


def scoped_run_or_404(request: HttpRequest, run_id: int):
    run = selectors.run_for_user(request.user, run_id)
    if run is None:
        raise Http404(f"no run {run_id} in your teams")
    return run


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = scoped_run_or_404(request, run_id)
    stalls = selectors.run_stalls(run)
    return render(
        request,
        "tracking/run_detail.html",
        {
            "run": run,
            "stalled": any(s["open"] for s in stalls),  # selectors.stalled_now, from the rows at hand
            "experiment": run.experiment,
            "can_write": can_write(request.user, run.experiment.project.team),
            "chart_config": {"pinned": selectors.pinned_keys(request.user), "async_prefix": ASYNC_PREFIX,
                             "async_charts": ASYNC_CHARTS},
            "phases": [*statuses.PROGRESS, "finished"],
            "attempt_records": selectors.attempt_records(run),
            "stalls": stalls,
            "alerts": selectors.run_alerts(run),
            "profiles": selectors.run_profiles(run),
        },
    )


@login_required
def full_log(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's whole log as plain text (what a failed run's one-line summary links to)."""
    run = scoped_run_or_404(request, run_id)
    texts = selectors.log_lines(run).values_list("text", flat=True).iterator(chunk_size=5000)
    return HttpResponse("".join(f"{selectors.log_text(text, run.run_dir)}\n" for text in texts),
                        content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def profile_download(request: HttpRequest, run_id: int, profile_id: int) -> FileResponse:
    """A profiler file of the run (a trace or a memory snapshot) as a download, read from the run's own directory."""
    found = selectors.open_profile(request.user, run_id, profile_id)
    if found is None:
        raise Http404(f"no profiler file {profile_id} of run {run_id} in your teams")
    handle, name = found
    return FileResponse(handle, as_attachment=True, filename=name)


@login_required
def rollouts(request: HttpRequest, run_id: int) -> HttpResponse:
    run = scoped_run_or_404(request, run_id)
    return render(
        request,
        "tracking/rollouts.html",
        {"run": run, "experiment": run.experiment, "stop_reasons": selectors.stop_reasons(run),
         "stop_reason_words": {r: selectors.stop_reason_words(r) for r in selectors.stop_reasons(run)},
         "env_tags": selectors.env_tags(run), "sorts": selectors.SORT_CHOICES,
         "compare_runs": selectors.history_runs(request.user).exclude(pk=run.pk)[:MAX_COMPARE_CHOICES]},
    )


@login_required
def rollout_frames(request: HttpRequest, sample_id: int) -> HttpResponse:
    """A trajectory's text frames, read from its run's own directory (never a path from elsewhere)."""
    text = selectors.rollout_frames(request.user, sample_id)
    if text is None:
        raise Http404(f"no frames for rollout sample {sample_id} in your teams")
    return HttpResponse(text, content_type="text/plain; charset=utf-8")


@login_required
def history(request: HttpRequest) -> HttpResponse:
    """The team's runs; every filter, the metric columns and the order are in the URL (shareable)."""
    query = selectors.HistoryQuery.from_params(request.GET)
    search, tag, status, sort, columns = query.search, query.tag, query.status, query.sort, query.columns
    page = Paginator(query.runs(request.user), 50).get_page(request.GET.get("page"))
    rows = [(run, [(getattr(run, f"metric_{i}_last"), getattr(run, f"metric_{i}_best")) for i in range(len(columns))])
            for run in page]
    return render(
        request,
        "tracking/history.html",
        {
            "page": page,
            "rows": rows,
            "q": search,
            "tag": tag,
            "status": status,
            "sort": sort,
            "columns": [{"key": c.key, "goal": c.goal, "last_sort": f"m{i}.last", "best_sort": f"m{i}.best"}
                        for i, c in enumerate(columns)],
            "colspan": 10 + 2 * len(columns),
            "metrics": ",".join(c.spec for c in columns),
            "statuses": RunStatus.choices,
            "tags": selectors.team_tags(request.user),
            "metric_keys": selectors.team_metric_keys(request.user),
        },
    )


@login_required
def history_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The history table of the same URL parameters as CSV, every page of it, metric columns included."""
    query = selectors.HistoryQuery.from_params(request.GET)
    rows = history_csv_rows(query.runs(request.user), query.columns)
    response = StreamingHttpResponse(csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="policylab-history.csv"'
    return response


def compare_ids(text: str) -> list[int]:
    """Run ids of a `runs=1,2,3` parameter, in order, without repeats, at most MAX_COMPARED."""
    ids: list[int] = []
    for value in text.split(","):
        run_id = parse_id(value.strip())
        if run_id is not None and run_id not in ids:
            ids.append(run_id)
    return ids[:MAX_COMPARED]


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    """Runs overlaid: `?runs=1,2`; `?add=3` and `?remove=1` answer with a redirect to the new list (the chart
    view's parameters, such as `smoothing`, go along)."""
    ids = compare_ids(request.GET.get("runs", ""))
    if "add" in request.GET or "remove" in request.GET:
        removed = parse_id(request.GET.get("remove", ""))
        ids = compare_ids(",".join(map(str, [i for i in ids if i != removed] + [request.GET.get("add", "")])))
        query = request.GET.copy()
        for name in ("runs", "add", "remove"):
            query.pop(name, None)
        rest = f"&{query.urlencode()}" if query else ""
        return redirect(f"{reverse('tracking:compare')}?runs={','.join(map(str, ids))}{rest}")
    runs = list(runs_for(request.user).filter(pk__in=ids).select_related("experiment"))
    runs.sort(key=lambda r: ids.index(r.pk))
    configs = [shown_config(effective_config(r.experiment.config, r.overrides)) for r in runs]
    candidates = selectors.history_runs(request.user).exclude(pk__in=ids)[:MAX_COMPARE_CHOICES]
    diff, unset = split_none_against_absent(config_diff(configs) if len(configs) > 1 else [])
    return render(
        request,
        "tracking/compare.html",
        {
            "runs": runs,
            "run_ids": [r.pk for r in runs],
            "missing": sorted(set(ids) - {r.pk for r in runs}),
            "diff": diff,
            "unset_keys": unset,
            "environment_diff": environment_diff(selectors.latest_fingerprints(runs)) if len(runs) > 1 else [],
            "candidates": candidates,
            "full": len(ids) >= MAX_COMPARED,
            "chart_config": {"pinned": selectors.pinned_keys(request.user), "async_prefix": ASYNC_PREFIX,
                             "async_charts": ASYNC_CHARTS},
        },
    )
