"""Format penalty: the response must match a regex (e.g. `<think>…</think>…`), or it is penalised."""

from __future__ import annotations

import re
from functools import lru_cache

DEFAULT_FORMAT_PATTERN = r"^<think>.*?</think>.*\S.*$"


@lru_cache(maxsize=64)
def compile_format_pattern(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"format_pattern: invalid regular expression {pattern!r}: {exc}") from exc


def format_reward(response: str, pattern: str = DEFAULT_FORMAT_PATTERN, penalty: float = -1.0,
                  reward: float = 0.0) -> float:
    """`reward` if `re.fullmatch(pattern, response.strip(), DOTALL)`, else `penalty`."""
    return reward if compile_format_pattern(pattern).fullmatch(response.strip()) else penalty
