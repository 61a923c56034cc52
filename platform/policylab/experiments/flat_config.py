"""A run's config as one flat mapping of dotted keys: what the compare view diffs, and what resume, fork and
checkpoint retention read a run's effective setting from (pure helpers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml


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
