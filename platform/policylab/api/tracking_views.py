"""REST endpoints of a run's tracking data (metrics series and export, rollouts, checkpoints, logs, events) and of
chart pins, authenticated and scoped like the rest of the API. Thin: the data comes from tracking's selectors and
services. Their URLs keep the `tracking:` namespace the pages and scripts name them by (see urls below)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.conf import settings
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from policylab.api.serializers import AlertOut, ErrorSerializer
from policylab.experiments.models import Run, RunStatus
from policylab.ids import MAX_ID
from policylab.query_budget import QueryStopped, client_gone, query_budget
from policylab.tracking import selectors, services
from policylab.tracking.models import Checkpoint


def scoped_run(request: Request, run_id: int) -> Run:
    run = selectors.run_for_user(request.user, run_id)
    if run is None:
        raise Http404(f"no run {run_id} in your teams")
    return run


class MetricsQuery(serializers.Serializer):
    keys = serializers.CharField(required=False, help_text="comma-separated metric keys (default: all)")
    max_points = serializers.IntegerField(required=False, default=selectors.DEFAULT_MAX_POINTS, min_value=4, max_value=100_000)
    x = serializers.ChoiceField(choices=selectors.X_AXES, required=False, default="step")
    source = serializers.ChoiceField(choices=("metrics", "system"), required=False, default="metrics")


class SeriesOut(serializers.Serializer):
    x = serializers.ListField(child=serializers.FloatField(), help_text="step, or unix time with x=time")
    y = serializers.ListField(child=serializers.FloatField(allow_null=True), help_text="null where NaN/inf")
    step = serializers.ListField(child=serializers.IntegerField())
    time = serializers.ListField(child=serializers.FloatField())


class MetricsOut(serializers.Serializer):
    run = serializers.IntegerField()
    x = serializers.ChoiceField(choices=selectors.X_AXES)
    keys = serializers.ListField(child=serializers.CharField(), help_text="every key the run has")
    missing_keys = serializers.ListField(child=serializers.CharField(), help_text="asked for, not found")
    series = serializers.DictField(child=SeriesOut())


ERRORS = {400: ErrorSerializer, 404: ErrorSerializer}
MAX_SEARCH_CHARS = 200


class RunMetrics(APIView):
    @extend_schema(
        parameters=[MetricsQuery],
        responses={200: MetricsOut, **ERRORS},
        description="Metric series of a run, each downsampled server-side to at most max_points points "
        "(per x bucket: first, last, min and max).",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = MetricsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        keys = [k for k in params.get("keys", "").split(",") if k] or None
        data = selectors.series(run, keys, max_points=params["max_points"], x=params["x"], source=params["source"])
        return Response(
            {
                "run": run.pk,
                "x": params["x"],
                "keys": selectors.metric_keys(run, params["source"]),
                "missing_keys": sorted(set(keys or ()) - set(data)),
                "series": data,
            }
        )


class RolloutQuery(serializers.Serializer):
    step_min = serializers.IntegerField(required=False)
    step_max = serializers.IntegerField(required=False)
    reward_min = serializers.FloatField(required=False)
    reward_max = serializers.FloatField(required=False)
    len_min = serializers.IntegerField(required=False, help_text="response length (tokens) at least")
    len_max = serializers.IntegerField(required=False)
    stop_reason = serializers.CharField(required=False, help_text="a response's stop reason, or a trajectory's done reason")
    q = serializers.CharField(required=False, max_length=MAX_SEARCH_CHARS,
                              help_text="text searched in prompt and response, ignoring case (plain text: `.*` is "
                              "two characters, not a pattern)")
    env_tag = serializers.CharField(required=False, help_text="agentic runs: the environment's tag")
    success = serializers.BooleanField(required=False, allow_null=True, default=None,
                                       help_text="agentic runs: whether the episode succeeded")
    turns_min = serializers.IntegerField(required=False, min_value=0, help_text="agentic runs: replies at least")
    turns_max = serializers.IntegerField(required=False, min_value=0)
    latest = serializers.BooleanField(required=False, default=False,
                                      help_text="only the newest step that has samples (step_min and step_max ignored)")
    sort = serializers.ChoiceField(choices=selectors.SORT_CHOICES, required=False, default="step",
                                   help_text="step (default), reward, advantage, length or turns; -name descending")


class RolloutPages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class RolloutOut(serializers.Serializer):
    id = serializers.IntegerField()
    step = serializers.IntegerField()
    group_id = serializers.IntegerField()
    sample_index = serializers.IntegerField()
    prompt = serializers.CharField()
    response = serializers.CharField()
    reward = serializers.FloatField(allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    prompt_length = serializers.IntegerField()
    response_length = serializers.IntegerField()
    stop_reason = serializers.CharField()
    stop_reason_text = serializers.CharField(help_text="what the stop (or done) reason means, in words")
    attempt = serializers.IntegerField()
    env_tag = serializers.CharField(allow_blank=True)
    success = serializers.BooleanField(allow_null=True)
    num_turns = serializers.IntegerField(allow_null=True)
    done_reason = serializers.CharField(allow_blank=True)
    frames_url = serializers.CharField(allow_null=True, help_text="agentic: the trajectory's rendered text frames")
    prompt_hash = serializers.CharField(help_text="the prompt's hash: ?prompt= of the prompt history")
    logprob_mismatch_mean = serializers.FloatField(
        allow_null=True, help_text="mean |trainer - engine| log-prob over the trained tokens; null when the sample "
        "does not carry both")
    logprob_mismatch_max = serializers.FloatField(allow_null=True, help_text="its largest token")
    tokens = serializers.ListField(child=serializers.CharField(), allow_null=True)
    token_logprobs = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                           help_text="the rollout engine's log-prob of each token, as it sampled")
    token_logprobs_trainer = serializers.ListField(
        child=serializers.FloatField(allow_null=True), allow_null=True,
        help_text="actor_train's log-prob of each token before the update (null when the run did not compute them)")
    token_logprob_mismatch = serializers.ListField(child=serializers.FloatField(allow_null=True), allow_null=True,
                                                   help_text="|trainer - engine| of each token")
    token_advantages = serializers.ListField(child=serializers.FloatField(), allow_null=True)
    token_mask = serializers.ListField(child=serializers.IntegerField(), allow_null=True,
                                       help_text="1 where the loss applies (agentic: the policy's own tokens)")
    turns = serializers.ListField(child=serializers.DictField(), allow_null=True,
                                  help_text="agentic: role, text, tokens, loss, reward, penalty, format_ok, action, "
                                  "stop_reason of each turn")


class RolloutPageOut(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = RolloutOut(many=True)
    steps = serializers.ListField(child=serializers.IntegerField(), help_text="steps that have samples")
    stop_reasons = serializers.ListField(child=serializers.CharField())
    stop_reason_texts = serializers.DictField(child=serializers.CharField(), help_text="each stop reason in words")
    env_tags = serializers.ListField(child=serializers.CharField(), help_text="agentic runs' environment tags")
    run_finished = serializers.BooleanField(help_text="the run's status is final: no new samples will come")


class RunRollouts(APIView):
    @extend_schema(
        parameters=[RolloutQuery, OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
        responses={200: RolloutPageOut, **ERRORS},
        description="Rollout samples of a run, filtered, sorted (by step, GRPO group and sample unless `sort` says "
        "otherwise) and paged.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = RolloutQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = selectors.rollouts_matching(run, selectors.RolloutFilters(**query.validated_data))
        pages = RolloutPages()
        budget = settings.POLICYLAB_ROLLOUT_SEARCH_BUDGET_S
        try:  # bounded in time, and stopped when the client goes away (policylab.query_budget)
            with query_budget(budget, client_gone(request)):
                page = pages.paginate_queryset(rows, request, view=self)
        except QueryStopped as exc:
            message = f"the search took longer than {budget:g} s; narrow it (steps, reward, a longer text)"
            raise ValidationError({"q": [message]} if query.validated_data.get("q") else [message]) from exc
        response = pages.get_paginated_response([selectors.rollout_dict(s) for s in page])
        response.data["steps"] = selectors.rollout_steps(run)
        response.data["stop_reasons"] = reasons = selectors.stop_reasons(run)
        response.data["stop_reason_texts"] = {reason: selectors.stop_reason_words(reason) for reason in reasons}
        response.data["env_tags"] = selectors.env_tags(run)
        response.data["run_finished"] = run.is_terminal
        return response


class RolloutSampleDetail(APIView):
    @extend_schema(
        responses={200: RolloutOut, **ERRORS},
        description="One rollout sample of a run of your teams with its per-token arrays: tokens, the engine's and "
        "the trainer's log-probs and their mismatch, advantages, mask, turns.",
    )
    def get(self, request: Request, sample_id: int) -> Response:
        sample = selectors.rollout_sample(request.user, sample_id)
        if sample is None:
            raise Http404(f"no rollout sample {sample_id} in your teams")
        return Response(selectors.rollout_dict(sample))


class PromptHistoryQuery(serializers.Serializer):
    prompt = serializers.CharField(max_length=20_000, trim_whitespace=False,
                                   help_text="the prompt: its hash (prompt_hash of a sample) or its exact text")
    compare = serializers.IntegerField(required=False, min_value=1, max_value=MAX_ID,
                                       help_text="a run of your teams to show beside this one")


class PromptHistoryPages(PageNumberPagination):
    page_size = 10
    page_size_query_param = "page_size"
    max_page_size = 50


class HistorySampleOut(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField(help_text="the sample with its tokens (/api/rollouts/<id>/)")
    step = serializers.IntegerField()
    group_id = serializers.IntegerField()
    sample_index = serializers.IntegerField()
    response = serializers.CharField(allow_blank=True)
    reward = serializers.FloatField(allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    response_length = serializers.IntegerField()
    stop_reason = serializers.CharField(allow_blank=True)
    stop_reason_text = serializers.CharField()
    attempt = serializers.IntegerField()
    logprob_mismatch_mean = serializers.FloatField(allow_null=True)
    logprob_mismatch_max = serializers.FloatField(allow_null=True)


class HistoryCellOut(serializers.Serializer):
    run = serializers.IntegerField()
    count = serializers.IntegerField(help_text="samples of the prompt the run logged at this step")
    samples = HistorySampleOut(many=True, help_text=f"the first {selectors.HISTORY_CELL_SAMPLES} by group and sample")


class HistoryRowOut(serializers.Serializer):
    step = serializers.IntegerField()
    cells = HistoryCellOut(many=True, help_text="one per run, in the order of `runs`")


class HistoryRunOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(help_text="its experiment's name")
    status = serializers.CharField()
    steps = serializers.IntegerField(help_text="steps at which it logged the prompt")
    samples = serializers.IntegerField()
    inspector_url = serializers.CharField()


class PromptHistoryOut(serializers.Serializer):
    count = serializers.IntegerField(help_text="steps at which either run logged the prompt")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    prompt = serializers.CharField()
    prompt_hash = serializers.CharField()
    runs = HistoryRunOut(many=True, help_text="this run, then the compared one")
    results = HistoryRowOut(many=True)


class RunPromptHistory(APIView):
    @extend_schema(
        parameters=[PromptHistoryQuery, OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
        responses={200: PromptHistoryOut, **ERRORS},
        description="One prompt's responses at every step that logged it, in this run and in a compared run side "
        "by side: a page of steps (rows), each with each run's samples (reward, length, stop reason, mean and max "
        "|trainer - engine| log-prob). 404 when neither run logged the prompt, or the compared run is not in your "
        "teams.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = PromptHistoryQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        compare_id = query.validated_data.get("compare")
        runs = [run] if compare_id in (None, run.pk) else [run, scoped_run(request, compare_id)]
        found = selectors.find_prompt(runs, query.validated_data["prompt"])
        if found is None:
            raise Http404(f"no sample of run {' or run '.join(str(r.pk) for r in runs)} has this prompt")
        key, text = found
        pages = PromptHistoryPages()
        steps = pages.paginate_queryset(selectors.prompt_steps(runs, key), request, view=self)
        response = pages.get_paginated_response(selectors.prompt_history(runs, key, steps))
        response.data |= {"prompt": text, "prompt_hash": key, "runs": selectors.prompt_run_totals(runs, key)}
        return response


# --- chart pins --------------------------------------------------------------------------------------------

class ChartPinIn(serializers.Serializer):
    key = serializers.CharField(max_length=200)
    pinned = serializers.BooleanField()


class ChartPinsOut(serializers.Serializer):
    keys = serializers.ListField(child=serializers.CharField(), help_text="the metric keys you pinned, oldest first")


class ChartPins(APIView):
    @extend_schema(responses={200: ChartPinsOut}, description="The metric charts you pinned (shown first on every "
                   "run page and on compare).")
    def get(self, request: Request) -> Response:
        return Response({"keys": selectors.pinned_keys(request.user)})

    @extend_schema(request=ChartPinIn, responses={200: ChartPinsOut, 400: ErrorSerializer},
                   description="Pin (pinned=true) or unpin a metric chart; answers with every pin you have.")
    def post(self, request: Request) -> Response:
        body = ChartPinIn(data=request.data)
        body.is_valid(raise_exception=True)
        return Response({"keys": services.set_chart_pin(request.user, **body.validated_data)})


# --- checkpoints, logs, events, metrics export ---------------------------------------------------------

class CheckpointOut(serializers.Serializer):
    id = serializers.IntegerField()
    step = serializers.IntegerField()
    path = serializers.CharField()
    size_bytes = serializers.IntegerField()
    contents = serializers.ListField(child=serializers.CharField())
    attempt = serializers.IntegerField()
    time = serializers.FloatField(help_text="unix time of the save")
    deleted = serializers.BooleanField(help_text="pruned by retention (max_ckpts_to_keep)")
    on_disk = serializers.BooleanField(help_text="not pruned and still on disk: fork accepts it")
    resumable = serializers.BooleanField(help_text="resume accepts it now (see `reason` when it does not)")
    offer = serializers.ChoiceField(choices=["resume", "fork", "none"],
                                    help_text="what it can be used for now: resume (or fork), fork only, or nothing")
    reason = serializers.CharField(allow_blank=True, help_text="why resume refuses it; empty when resumable")
    fork_max_steps = serializers.IntegerField(
        allow_null=True, help_text="set when resuming would train nothing (the run finished all its steps): a "
        "max_steps with which a fork from it trains on")


class CheckpointPages(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class CheckpointPageOut(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = CheckpointOut(many=True)


class RunCheckpoints(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
        responses={200: CheckpointPageOut, **ERRORS},
        description="The run's checkpoints, newest step first, as retention left them, each with what it can be "
        "used for now: resumable=false with the reason for one that max_ckpts_to_keep pruned (or that is gone from "
        "disk, on_disk=false), for one at the run's max_steps (fork it with a larger max_steps: fork_max_steps), "
        "and while the run is live.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        pages = CheckpointPages()
        page = pages.paginate_queryset(Checkpoint.objects.filter(run=run).order_by("-step"), request, view=self)
        return pages.get_paginated_response(selectors.checkpoint_dicts(run, page))


class RunAlerts(APIView):
    @extend_schema(
        responses={200: AlertOut(many=True), **ERRORS},
        description="The run's health alerts (decision 0050), newest first: the step, the kind, the metric, its value "
        "against the threshold, the step's samples that tripped it and the inspector's address at that step.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        return Response(AlertOut(selectors.run_alerts(scoped_run(request, run_id)), many=True).data)


class RunStateOut(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    step = serializers.IntegerField()
    total_steps = serializers.IntegerField(allow_null=True)
    eta_s = serializers.FloatField(allow_null=True)
    message = serializers.CharField(allow_blank=True)
    version = serializers.IntegerField(help_text="grows with every change of this state")
    cancel_requested = serializers.BooleanField()
    cancellable = serializers.BooleanField()
    resumable = serializers.BooleanField()
    finished = serializers.BooleanField()


class CursorQuery(serializers.Serializer):
    after = serializers.IntegerField(required=False, default=0, min_value=0, max_value=MAX_ID,
                                     help_text="the cursor of the last item you have (next_after of the previous page)")
    limit = serializers.IntegerField(required=False, default=500, min_value=1, max_value=5000)


class LogLineOut(serializers.Serializer):
    id = serializers.IntegerField(help_text="the cursor: ask for ?after=<id> to get the lines after this one")
    seq = serializers.IntegerField(help_text="the trainer event's seq; negative for the Ray driver's output")
    line_no = serializers.IntegerField(help_text="the line's index within its event (seq, line_no is unique)")
    attempt = serializers.IntegerField()
    level = serializers.CharField(help_text='a log level, or "driver" for the Ray job\'s output')
    text = serializers.CharField(allow_blank=True, help_text="ANSI colour codes removed")
    time = serializers.FloatField()


class LogPageOut(serializers.Serializer):
    run = RunStateOut()
    results = LogLineOut(many=True)
    next_after = serializers.IntegerField(help_text="pass as ?after= to tail the log")


class RunLogs(APIView):
    @extend_schema(
        parameters=[CursorQuery],
        responses={200: LogPageOut, **ERRORS},
        description="The run's log lines in the order they were stored (the trainer's log events and the Ray "
        "driver's output), ANSI colour codes stripped, at most `limit` per page. Tail a live run by asking "
        "again with ?after=<next_after> until run.finished is true and a page comes back empty.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = CursorQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        after, limit = query.validated_data["after"], query.validated_data["limit"]
        state = selectors.fresh_run_state(run)  # read first: lines stored after it come on the next page
        lines = [selectors.log_dict(line) for line in selectors.log_lines(run, after=after)[:limit]]
        return Response({"run": state, "results": lines, "next_after": lines[-1]["id"] if lines else after})


class EventOut(serializers.Serializer):
    type = serializers.CharField()
    seq = serializers.IntegerField()
    step = serializers.IntegerField()
    time = serializers.FloatField()
    attempt = serializers.IntegerField()
    data = serializers.DictField()


class EventPageOut(serializers.Serializer):
    run = RunStateOut()
    seq = serializers.IntegerField(help_text="the largest seq stored for the run")
    events = EventOut(many=True)
    next_after = serializers.IntegerField(allow_null=True, help_text="pass as ?after= for the next page; "
                                          "null when no stored event follows yet")


class RunEvents(APIView):
    @extend_schema(
        parameters=[CursorQuery],
        responses={200: EventPageOut, **ERRORS},
        description="The run's telemetry events with seq > after, rebuilt from what ingest stored (metrics, "
        "rollouts without token arrays, checkpoints, logs, system), in seq order, at most `limit` events. "
        "Status events are not stored one by one: their effect is `run`, the run's current state.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = CursorQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(selectors.events_page(run, after=query.validated_data["after"],
                                              limit=min(query.validated_data["limit"], 1000)))


class CSVRenderer(BaseRenderer):
    """A table ({"columns": [...], "rows": [[...], ...]}) as CSV; anything else (an error body) as its JSON
    text, which ApiErrorBodyMiddleware then answers as the API's JSON error."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: dict | None = None) -> str:
        if not (isinstance(data, dict) and "columns" in data and "rows" in data):
            return json.dumps(data)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(data["columns"])
        writer.writerows(["" if value is None else value for value in row] for row in data["rows"])
        return out.getvalue()


class MetricsTableOut(serializers.Serializer):
    run = serializers.IntegerField()
    columns = serializers.ListField(child=serializers.CharField(), help_text='"step", then every metric key')
    rows = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="one row per step; null where the step has no value for a key (or it was NaN/inf)",
    )


class RunMetricsExport(APIView):
    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        parameters=[OpenApiParameter("format", str, enum=["json", "csv"], description="json (default) or csv")],
        responses={(200, "application/json"): MetricsTableOut, (200, "text/csv"): OpenApiTypes.STR,
                   (404, "application/json"): ErrorSerializer},
        description="Every metric point of the run at full resolution (no downsampling), one row per step, "
        "as JSON or as CSV (?format=csv or Accept: text/csv).",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        columns, rows = selectors.metrics_table(run)
        response = Response({"run": run.pk, "columns": columns, "rows": rows})
        if request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-metrics.csv"'
        return response
