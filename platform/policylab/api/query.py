"""Query parameters the API does not know are a 400 that names them and lists the ones it knows, never
silently ignored (`GET /api/runs/?search=x` answered every run while `search` was no filter).

What an endpoint knows is what its OpenAPI document lists for it (its filters, its paging, `after`,
`format` where it documents one), so the document and the check cannot disagree: a parameter a view
reads but does not document is refused until it is documented. DRF's `?format=` (the renderer override)
is accepted everywhere, as DRF does."""

from __future__ import annotations

import functools
import threading
from typing import Any

from rest_framework.permissions import BasePermission

from policylab.experiments.services import ValidationFailed, issue

ALWAYS = frozenset({"format"})


_BUILDING = threading.Lock()


def documented_query_parameters() -> dict[tuple[type, str], frozenset[str]]:
    """(view class, HTTP method) -> the query parameters the OpenAPI document lists for it. Built once per
    process, on the first request that carries a query string (about half a second), by one thread:
    drf-spectacular's first generation is not thread-safe (its extensions resolve their target classes
    lazily, and two threads doing it at once fail with AttributeError: the run page's first parallel
    metric requests answered 500 and its charts stayed empty)."""
    with _BUILDING:
        return _documented_query_parameters()


@functools.cache
def _documented_query_parameters() -> dict[tuple[type, str], frozenset[str]]:
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator()
    paths = generator.get_schema(request=None, public=True)["paths"]
    known: dict[tuple[type, str], frozenset[str]] = {}
    for path, _regex, method, view in generator._get_paths_and_endpoints():
        operation = paths.get(path, {}).get(method.lower())
        if operation is None:
            continue
        names = frozenset(p["name"] for p in operation.get("parameters", ()) if p.get("in") == "query")
        key = (type(view), method.upper())
        known[key] = known.get(key, frozenset()) | names
    return known


def unknown_query_parameters(view: Any, method: str, names: set[str]) -> tuple[list[str], list[str]] | None:
    """(unknown names, accepted names) when `names` holds any the endpoint does not document; None when all
    are known or the endpoint is not in the document (nothing to check it against)."""
    method = "GET" if method.upper() == "HEAD" else method.upper()
    known = documented_query_parameters().get((type(view), method))
    if known is None:
        return None
    accepted = known | ALWAYS
    unknown = sorted(names - accepted)
    return (unknown, sorted(accepted)) if unknown else None


class KnownQueryParameters(BasePermission):
    """Runs, as DRF's last permission, for every API view after authentication: anonymous callers learn
    nothing of the parameters, and a signed-in caller's typo is a 400 naming it, with the valid ones."""

    def has_permission(self, request: Any, view: Any) -> bool:
        if not request.query_params:
            return True
        found = unknown_query_parameters(view, request.method, set(request.query_params))
        if found is None:
            return True
        unknown, accepted = found
        valid = ", ".join(accepted)
        raise ValidationFailed([issue(name, f"unknown query parameter {name!r}; this endpoint accepts: {valid}")
                                for name in unknown])
