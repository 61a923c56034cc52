"""The API's JSON parser: DRF's, with limits checked before and after `json.loads`.

- Nesting depth is counted on the raw text first: `json.loads` recurses once per `[`/`{`, and
  200,000 of them raise RecursionError (a 500). Real request bodies nest fewer than 10 levels; the
  config inside one is held to trainer.config.bounds.MAX_DEPTH later anyway.
- A lone UTF-16 surrogate (`"\\ud800"`) is legal JSON text but not Unicode: Python keeps it in a
  str, and the response renderer or the database driver then fails to encode it (a 500). Such a
  body is refused here, naming where the string is.
- NUL (`"\\u0000"`) is legal JSON and Unicode, but PostgreSQL's text and jsonb refuse it (a 500 from
  the driver where SQLite stored it): refused the same way.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json as drf_json

MAX_JSON_DEPTH = 64
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# the only ways a surrogate or a NUL gets into JSON text (raw control characters are refused by the parser)
_UNSTORABLE_ESCAPE = re.compile(r"\\u([dD][89a-fA-F]|0000)")
_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether `[`/`{` outside strings nest deeper than `limit` (stops at the first level past it)."""
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def unstorable_string_path(data: Any) -> str | None:
    """The dotted path of the first key or string holding a surrogate code point or a NUL, else None."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if _UNSTORABLE.search(node):
                return path or "(the body)"
        elif isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}" if path else str(key)
                if _UNSTORABLE.search(key):
                    return child
                stack.append((child, value))
        elif isinstance(node, list):
            stack.extend((f"{path}.{index}" if path else str(index), value) for index, value in enumerate(node))
    return None


def parse_json_text(text: str, *, strict: bool = True) -> Any:
    """`text` as JSON, or ParseError naming the limit or the problem."""
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels; the limit is {MAX_JSON_DEPTH}")
    try:
        data = drf_json.loads(text, parse_constant=drf_json.strict_constant if strict else None)
    except ValueError as exc:
        raise ParseError(f"JSON parse error - {exc}") from None
    if _UNSTORABLE_ESCAPE.search(text):
        path = unstorable_string_path(data)
        if path is not None:
            path = path.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")  # keys may hold it
            raise ParseError(
                f"JSON parse error - the string at {path} holds a NUL (\\u0000) or a lone UTF-16 surrogate "
                "(\\ud800-\\udfff), which the database cannot store; drop the NUL, and send each non-BMP "
                "character as a surrogate pair or as UTF-8"
            )
    return data


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}: {exc.reason}") from None
        return parse_json_text(text, strict=self.strict)
