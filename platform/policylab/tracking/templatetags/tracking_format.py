"""Template helpers of the tracking pages: numbers rounded for reading, durations, sortable headers."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django import template
from django.utils.html import format_html

register = template.Library()


@register.filter
def rounded(value: Any) -> str:
    """4 significant digits (the exact value goes in the cell's title); "—" when missing."""
    if value is None:
        return "—"
    number = float(value)
    if not math.isfinite(number):
        return str(number)
    if number == int(number) and abs(number) < 1e15:
        return str(int(number))
    if abs(number) < 1e-3 or abs(number) >= 1e6:
        return f"{number:.2e}"
    return f"{number:.4g}"


@register.filter
def duration_text(value: timedelta | None) -> str:
    """1 h 05 min, 3 min 20 s, 42 s."""
    if value is None:
        return "—"
    seconds = max(0, int(value.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


@register.simple_tag(takes_context=True)
def sort_link(context: template.Context, name: str, label: str) -> str:
    """A header link that sorts by `name` (descending first; a second click ascending), marked when active."""
    request = context["request"]
    current = request.GET.get("sort", "-created")
    params = request.GET.copy()
    params.pop("page", None)
    params["sort"] = name if current == f"-{name}" else f"-{name}"
    arrow = " ▼" if current == f"-{name}" else " ▲" if current == name else ""
    return format_html('<a class="sort{}" href="?{}" data-sort="{}">{}{}</a>', " active" if arrow else "",
                       params.urlencode(), name, label, arrow)
