"""Ids from URLs and query strings, bounded before they reach the database.

Every primary key is a 64-bit signed integer. Django guards plain `pk=` lookups against larger
values, but not `__in`, foreign-key lookups or slicing: there the driver raises OverflowError
(SQLite) or DataError (PostgreSQL) and the request answers 500.
"""

from __future__ import annotations

MAX_ID = 2**63 - 1
_MAX_DIGITS = len(str(MAX_ID))


def parse_id(text: str) -> int | None:
    """The id `text` spells (ASCII digits, at most MAX_ID), else None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):  # "²".isdigit() is True, int("²") raises
        return None
    if len(text.lstrip("0")) > _MAX_DIGITS:  # also keeps int() clear of its 4,300-digit limit
        return None
    value = int(text)
    return value if value <= MAX_ID else None
