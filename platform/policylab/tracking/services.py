"""Writes of the tracking app that come from users (ingest writes the telemetry itself)."""

from __future__ import annotations

from typing import Any

from policylab.tracking.models import ChartPin
from policylab.tracking.selectors import pinned_keys


def set_chart_pin(user: Any, *, key: str, pinned: bool) -> list[str]:
    """Pin or unpin the chart of metric `key` for `user` (idempotent); returns every key the user pinned."""
    if pinned:
        ChartPin.objects.get_or_create(user=user, key=key)
    else:
        ChartPin.objects.filter(user=user, key=key).delete()
    return pinned_keys(user)
