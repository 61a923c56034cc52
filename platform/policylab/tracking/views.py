"""Pages of tracking: run dashboard, rollout inspector, history and compare. Thin: data comes from
selectors (scoped through accounts.scoping); live data comes over the websocket and the API."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from policylab.accounts.scoping import can_write
from policylab.experiments.models import RunStatus
from policylab.experiments.selectors import runs_for
from policylab.ids import parse_id
from policylab.tracking import selectors
from policylab.tracking.compare import config_diff, effective_config

MAX_COMPARED = 8


def scoped_run_or_404(request: HttpRequest, run_id: int):
    run = selectors.run_for_user(request.user, run_id)
    if run is None:
        raise Http404(f"no run {run_id} in your teams")
    return run


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = scoped_run_or_404(request, run_id)
    return render(
        request,
        "tracking/run_detail.html",
        {"run": run, "experiment": run.experiment, "can_write": can_write(request.user, run.experiment.project.team)},
    )


@login_required
def rollouts(request: HttpRequest, run_id: int) -> HttpResponse:
    run = scoped_run_or_404(request, run_id)
    return render(
        request,
        "tracking/rollouts.html",
        {"run": run, "experiment": run.experiment, "steps": selectors.rollout_steps(run), "stop_reasons": selectors.stop_reasons(run)},
    )


@login_required
def history(request: HttpRequest) -> HttpResponse:
    search = request.GET.get("q", "").strip()
    tag = request.GET.get("tag", "").strip()
    status = request.GET.get("status", "").strip()
    runs = selectors.history_runs(request.user, search=search, tag=tag, status=status)
    page = Paginator(runs, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "tracking/history.html",
        {
            "page": page,
            "q": search,
            "tag": tag,
            "status": status,
            "statuses": RunStatus.choices,
            "tags": selectors.team_tags(request.user),
        },
    )


@login_required
def compare(request: HttpRequest) -> HttpResponse:
    ids = [i for i in map(parse_id, request.GET.get("runs", "").split(",")) if i is not None][:MAX_COMPARED]
    runs = list(runs_for(request.user).filter(pk__in=ids).select_related("experiment"))
    runs.sort(key=lambda r: ids.index(r.pk))
    configs = [effective_config(r.experiment.config, r.overrides) for r in runs]
    return render(
        request,
        "tracking/compare.html",
        {
            "runs": runs,
            "run_ids": [r.pk for r in runs],
            "missing": sorted(set(ids) - {r.pk for r in runs}),
            "diff": config_diff(configs) if len(configs) > 1 else [],
        },
    )
