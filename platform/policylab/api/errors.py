"""One error shape for every error of the API: {"errors": [{"field", "message"}], "warnings": [...]}.

Errors raised outside DRF's views (unknown URLs, bodies over the size limit, 500s) get the same
shape from policylab.middleware.ApiErrorBodyMiddleware."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from policylab.experiments.services import QuotaExceeded, RunStateError, ValidationFailed


def error_body(message: str, field: str = "") -> dict[str, Any]:
    """The API's error shape for one message (also used for errors raised outside DRF's views)."""
    return {"errors": [{"field": field, "message": message}], "warnings": []}


def issue_dicts(issues) -> list[dict[str, str]]:
    return [{"field": i.path, "message": i.message} for i in issues]


def flatten_detail(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested error detail -> [{"field": "a.b", "message": ...}]."""
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for key, value in detail.items():
            field = "" if key == "non_field_errors" else str(key)
            out += flatten_detail(value, f"{prefix}.{field}" if prefix and field else prefix or field)
        return out
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [{"field": prefix, "message": str(item)} for item in detail]
        out = []
        for index, item in enumerate(detail):
            out += flatten_detail(item, f"{prefix}.{index}" if prefix else str(index))
        return out
    return [{"field": prefix, "message": str(detail)}]


def validation_failed_response(exc: ValidationFailed) -> Response:
    return Response(
        {"errors": issue_dicts(exc.errors), "warnings": issue_dicts(exc.warnings)},
        status=status.HTTP_400_BAD_REQUEST,
    )


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, QuotaExceeded):  # the team's live runs fill its quota: try again once one ends
        return Response({"errors": issue_dicts(exc.errors), "warnings": []}, status=status.HTTP_429_TOO_MANY_REQUESTS)
    if isinstance(exc, ValidationFailed):
        return validation_failed_response(exc)
    if isinstance(exc, RunStateError):
        return Response({"errors": [{"field": "", "message": str(exc)}], "warnings": []}, status=status.HTTP_409_CONFLICT)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ValidationError):
        response.data = {"errors": flatten_detail(exc.detail), "warnings": []}
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"errors": [{"field": "", "message": str(response.data["detail"])}], "warnings": [], **response.data}
    return response
