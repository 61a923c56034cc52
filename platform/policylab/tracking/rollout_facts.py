"""What ingest derives from a rollout sample once, so that reads need not: the prompt's hash (the key that
finds a prompt's samples across steps and runs) and the trainer-engine log-prob mismatch."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

PROMPT_HASH_CHARS = 32  # 128 bits of sha256: no two prompts of a team's runs share one in practice
PROMPT_HASH = re.compile(rf"[0-9a-f]{{{PROMPT_HASH_CHARS}}}")


def prompt_hash(prompt: str) -> str:
    """The hash of a prompt's text as stored (sha256 of its UTF-8, hex, PROMPT_HASH_CHARS long)."""
    return hashlib.sha256(prompt.encode("utf-8", errors="surrogatepass")).hexdigest()[:PROMPT_HASH_CHARS]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def token_mismatch(trainer: Any, engine: Any) -> list[float | None] | None:
    """|trainer - engine| per token; None where a token lacks either number (NaN sent as null), and None for
    the whole sample when either array is missing or the two are not the same length."""
    if not isinstance(trainer, list) or not isinstance(engine, list) or len(trainer) != len(engine):
        return None
    gaps = []
    for t, e in zip(trainer, engine, strict=True):
        t, e = _number(t), _number(e)
        gaps.append(None if t is None or e is None else abs(t - e))
    return gaps


def mismatch_summary(gaps: Sequence[float | None] | None, mask: Any) -> tuple[float | None, float | None]:
    """(mean, max) of the per-token gaps over the trained tokens (token_mask 1; every token without a mask);
    (None, None) when there is nothing to summarise."""
    if gaps is None:
        return None, None
    trained = mask if isinstance(mask, list) and len(mask) == len(gaps) else [1] * len(gaps)
    kept = [g for g, m in zip(gaps, trained, strict=True) if m and g is not None]
    if not kept:
        return None, None
    return sum(kept) / len(kept), max(kept)
