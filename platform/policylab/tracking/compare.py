"""Pure helpers of the compare view (the flat configs it compares: experiments.flat_config)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.telemetry.fingerprint import flatten

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


def split_none_against_absent(
    rows: Sequence[tuple[str, list[Any]]],
) -> tuple[list[tuple[str, list[Any]]], list[str]]:
    """config_diff's rows parted into real differences and the keys that differ only as None in some
    configs against no key at all in the others: the same setting (unset) spelled two ways, which the
    model dumps of two config shapes yield by the hundred. Compare counts and lists only the first."""
    differ: list[tuple[str, list[Any]]] = []
    unset: list[str] = []
    for key, values in rows:
        if all(v is None or v is MISSING for v in values):
            unset.append(key)
        else:
            differ.append((key, values))
    return differ, unset


_DIGEST = re.compile(r"^[0-9a-f]{40,64}$")


NO_DATA = "none recorded"  # an empty `data` section: an agentic run's fingerprint before it named its environments


def environment_diff(fingerprints: Sequence[Mapping[str, Any] | None]) -> list[tuple[str, list[Any]]]:
    """What differs between runs' fingerprints (packages, PolicyLab commit, hardware, config hash, data
    hashes), one row per fact as config_diff lists them; a run without a fingerprint shows MISSING throughout.
    Hashes and commits are shortened to 12 characters (still unique in practice). A config hash that differs
    while nothing else does is left out: the config table says what differs in the configs, and a hash alone
    would read as the only change between the runs."""
    flat = [flatten(f) if f else {} for f in fingerprints]
    rows = [(key, [NO_DATA if key == "data" and v == {} else shorten(v) for v in values])
            for key, values in config_diff(flat)]
    if [key for key, _ in rows] == ["config_hash"] and all(fingerprints):
        return []
    return rows


def shorten(value: Any) -> Any:
    return f"{value[:12]}…" if isinstance(value, str) and _DIGEST.match(value) else value
