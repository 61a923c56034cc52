"""Pure helpers of the compare view."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

MISSING = "—"


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are leaves (compared whole)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out |= flatten(value, path)
        else:
            out[path] = value
    return out


def effective_config(config: Mapping[str, Any], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The flat config a run used: its experiment's config with the run's "key=value" overrides
    (values read as YAML scalars, as the trainer's dotlist does)."""
    flat = flatten(config)
    for item in overrides:
        key, _, value = str(item).partition("=")
        flat[key.strip().lstrip("+")] = yaml.safe_load(value) if value else value
    return flat


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
