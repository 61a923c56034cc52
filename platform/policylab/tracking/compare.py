"""Pure helpers of the compare view (the flat configs it compares: experiments.flat_config)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MISSING = "—"


def config_diff(flat_configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The dotted keys whose values are not the same in every (flat) config, with each config's
    value (MISSING where a config lacks the key), sorted by key."""
    keys = sorted(set().union(*flat_configs)) if flat_configs else []
    rows = []
    for key in keys:
        values = [c.get(key, MISSING) for c in flat_configs]
        if any(v != values[0] for v in values[1:]):
            rows.append((key, values))
    return rows
