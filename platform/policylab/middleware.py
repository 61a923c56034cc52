"""Web-surface middleware: request size, JSON error bodies for the API, and the Content-Security-Policy.

Order in settings.MIDDLEWARE: SecurityMiddleware, then ApiErrorBodyMiddleware (outermost of ours, so
it also sees what the others and Django's own handlers answer), then RequestSizeLimitMiddleware
(before anything reads the body), then NulInQueryMiddleware, then ContentSecurityPolicyMiddleware.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from policylab.api.errors import error_body

Handler = Callable[[HttpRequest], HttpResponse]
API_PREFIX = "/api/"


def wants_json(request: HttpRequest) -> bool:
    """API calls, and the pages' own fetch() calls (the config editor's live check)."""
    return request.path_info.startswith(API_PREFIX) or request.headers.get("X-Requested-With") == "fetch"


def json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse(error_body(message), status=status)


class ApiErrorBodyMiddleware:
    """Every error under /api/ answers the API's error shape, whoever produced it: Django's 404 for
    an unknown URL, its 400 for a suspicious request, the 500 page (never a traceback, DEBUG or not),
    a CSRF 403. Responses that are JSON already (DRF's, the views') pass unchanged."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not wants_json(request):
            return response
        if "json" in response.get("Content-Type", ""):
            return response
        converted = json_error(response.status_code, status_message(response.status_code))
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                converted[header] = response[header]
        return converted


def status_message(status: int) -> str:
    if status >= 500:
        return "internal server error; the error was logged"
    try:
        return HTTPStatus(status).phrase.lower()
    except ValueError:
        return f"HTTP {status}"


class RequestSizeLimitMiddleware:
    """413 for a body declared larger than DATA_UPLOAD_MAX_MEMORY_SIZE, before anything reads it.

    Django checks the limit only where it reads request.body or request.POST itself; DRF's parsers
    read the stream (no check), and when Django's check fires it is a 400 with an HTML page. No
    endpoint takes file uploads (the editor reads a file into the YAML text), so the limit is the
    whole body's."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and declared_length(request) > limit:
            message = f"request body is larger than {limit} bytes"
            if wants_json(request):
                return json_error(413, message)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def declared_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class NulInQueryMiddleware:
    """400 naming the parameter for a query string that holds a NUL character (`?search=%00`).

    PostgreSQL's text refuses NUL, so a filter built from such a value was a 500 from the database
    driver (the API fuzz test found it on /api/runs/?search=); SQLite took it. Django's and DRF's form
    fields refuse NUL in bodies already; query parameters reach querysets unchecked, on every page."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in value for value in values):
                shown = name.replace("\x00", "\\x00")
                message = f"query parameter {shown!r} holds a NUL character (\\x00), which no parameter accepts"
                if wants_json(request):
                    return json_error(400, message)
                return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


class ContentSecurityPolicyMiddleware:
    """Sets settings.CONTENT_SECURITY_POLICY on every response that has none (Django 5.2 has no CSP
    support of its own; 6.0 adds it, and this class can then go)."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.policy = "; ".join(f"{name} {' '.join(sources)}" for name, sources in settings.CONTENT_SECURITY_POLICY.items())

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy:
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
