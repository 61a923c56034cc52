"""The one deep merge of config mappings (Hydra `defaults:` layers, an importer's built-in defaults)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, key by key: where both hold a mapping the two merge, else `top`'s value wins.
    Neither input is modified, and the result shares no mutable value with them."""
    out = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
