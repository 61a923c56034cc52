"""REST endpoints of tracking (metrics series, rollouts), authenticated and scoped like the platform API."""

from __future__ import annotations

from django.db import DataError
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from policylab.api.serializers import ErrorSerializer
from policylab.experiments.models import Run
from policylab.tracking import selectors


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
    stop_reason = serializers.CharField(required=False)
    q = serializers.CharField(required=False, help_text="regular expression searched in prompt and response")

    def validate_q(self, value: str) -> str:
        try:
            return selectors.check_pattern(value)
        except selectors.BadPattern as exc:
            raise serializers.ValidationError(str(exc)) from exc


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
    attempt = serializers.IntegerField()
    tokens = serializers.ListField(child=serializers.CharField(), allow_null=True)
    token_logprobs = serializers.ListField(child=serializers.FloatField(), allow_null=True)
    token_advantages = serializers.ListField(child=serializers.FloatField(), allow_null=True)


class RolloutPageOut(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = RolloutOut(many=True)
    steps = serializers.ListField(child=serializers.IntegerField(), help_text="steps that have samples")
    stop_reasons = serializers.ListField(child=serializers.CharField())


class RunRollouts(APIView):
    @extend_schema(
        parameters=[RolloutQuery, OpenApiParameter("page", int), OpenApiParameter("page_size", int)],
        responses={200: RolloutPageOut, **ERRORS},
        description="Rollout samples of a run, filtered and paged, ordered by step, GRPO group and sample.",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = scoped_run(request, run_id)
        query = RolloutQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = selectors.rollouts_matching(run, selectors.RolloutFilters(**query.validated_data))
        pages = RolloutPages()
        try:
            page = pages.paginate_queryset(rows, request, view=self)
        except DataError as exc:  # PostgreSQL's regex dialect rejects some patterns Python accepts
            raise ValidationError({"q": [f"the database rejected the pattern: {exc}"]}) from exc
        response = pages.get_paginated_response([selectors.rollout_dict(s) for s in page])
        response.data["steps"] = selectors.rollout_steps(run)
        response.data["stop_reasons"] = selectors.stop_reasons(run)
        return response
