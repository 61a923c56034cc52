"""Limits on config input, enforced before any parser or resolver can crash or stall on it.

A config arrives from a browser or the API as YAML text or a JSON object. Without limits, ~26,000
nested `[` segfault libyaml's composer, nine levels of YAML aliases expand to millions of nodes,
and twenty levels of `${x}${x}` build a string of megabytes from a kilobyte. So:

- YAML text is streamed through libyaml's event parser (iterative C, no recursion) and abandoned
  at the first limit crossed: size, nesting depth, alias count, the values aliases add once
  expanded, and node count after alias expansion. Only text that passes is composed into Python
  objects.
- Mappings (JSON) are walked iteratively for the same depth and node limits.
- `${…}` interpolation may only call the resolvers listed in ALLOWED_RESOLVERS, and an upper bound
  of the resolved size (references expanded, memoised, linear in the config) must stay under
  MAX_RESOLVED_CHARS before OmegaConf resolves anything.
- Integers stay within what the platform stores: every integer of a config within a 64-bit column
  (INT64_MAX; the step count, kept in 32-bit columns, within schema.STEP_MAX). A larger number used
  to pass validation and then stop telemetry ingest.

Each violation is a ConfigError naming the limit, so the web side answers a clear 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from trainer.config.issues import ConfigError, ConfigIssue

MAX_CONFIG_CHARS = 1_000_000  # real configs are 2-50 kB
MAX_DEPTH = 64  # real configs nest 3-8 levels
MAX_NODES = 20_000  # after alias expansion; verl's full ppo_trainer.yaml has ~600
MAX_ALIASES = 1_000
# Values that aliases add once expanded: a 2.4 kB 9x9x9x9 alias bomb stays under MAX_NODES (8,200 values)
# yet costs seconds of CPU downstream (OmegaConf, validation); anchors in real configs reuse a section or
# two (tens of values each).
MAX_ALIAS_NODES = 1_000
MAX_RESOLVED_CHARS = 4_000_000
# Our arithmetic resolvers and `secret` (loading._register_resolvers; a secret's reference resolves to itself);
# `oc.env` is handled before OmegaConf sees the config (loading.apply_env). OmegaConf's other built-ins
# (oc.select, oc.create, oc.decode, …) could copy subtrees past the size bound below, and no framework config
# needs them.
ALLOWED_RESOLVERS = ("add", "subtract", "multiply", "int_div", "divide", "not", "secret")
RESOLVER_OUTPUT_CHARS = 64  # a number or a boolean
SCALAR_CHARS = 8
INT64_MAX = 2**63 - 1  # the largest integer the platform stores (PostgreSQL bigint: seqs, steps, sizes)

_COLLECTION_START = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_COLLECTION_END = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
_UNESCAPED_OPEN = re.compile(r"(?<!\\)\$\{")
_REFERENCE = re.compile(r"\s*(\.*[\w\-]+(?:\.[\w\-]+|\[\d+\])*)\s*\}")
_RESOLVER = re.compile(r"\s*([\w.]+)\s*:")


def limit_error(where: str, message: str, path: str = "") -> ConfigError:
    return ConfigError([ConfigIssue(path, f"{where}: {message}")])


def check_text_size(text: str, where: str) -> None:
    if len(text) > MAX_CONFIG_CHARS:
        raise limit_error(where, f"config is {len(text):,} characters; the limit is {MAX_CONFIG_CHARS:,}")


def check_yaml_text(text: str, where: str, loader: type) -> None:
    """Stream `text`'s YAML events with `loader`'s parser and stop at the first limit crossed.
    Syntax errors are left to the real load, which reports them with their line."""
    check_text_size(text, where)
    anchors: dict[str, int] = {}
    frames: list[list[Any]] = []  # [expanded nodes, anchor] of each open collection
    nodes = aliases = alias_nodes = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, _COLLECTION_END):
                size, anchor = frames.pop()
                if anchor:
                    anchors[anchor] = size
                if frames:
                    frames[-1][0] += size
                continue
            if isinstance(event, yaml.ScalarEvent):
                grown = 1
                if event.anchor:
                    anchors[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise limit_error(where, f"has more than {MAX_ALIASES:,} YAML aliases (*name); the limit is {MAX_ALIASES:,}")
                grown = anchors.get(event.anchor, 1)
                alias_nodes += grown
                if alias_nodes > MAX_ALIAS_NODES:
                    raise limit_error(
                        where, f"YAML aliases (*name) expand to more than {MAX_ALIAS_NODES:,} values; the limit is "
                        f"{MAX_ALIAS_NODES:,} (write a large repeated section out, or reuse it fewer times)"
                    )
            elif isinstance(event, _COLLECTION_START):
                if len(frames) >= MAX_DEPTH:
                    raise limit_error(where, f"nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}")
                frames.append([1, event.anchor])  # the collection counts itself
                nodes += 1
                grown = 0
            else:
                continue
            if frames:
                frames[-1][0] += grown
            nodes += grown
            if nodes > MAX_NODES:
                raise limit_error(
                    where, f"expands to more than {MAX_NODES:,} values (after YAML aliases); the limit is {MAX_NODES:,}"
                )
    except yaml.YAMLError as error:
        # PyYAML >= 6.0.4's scanner refuses deep flow nesting itself, before its parser yields the events
        # counted above (it reads every `[` ahead while a simple key may still follow): the same limit.
        if "exceeded maximum nesting depth" in str(error):
            raise limit_error(where, f"nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}") from None
        return  # the real load reports syntax errors with their line


def check_tree(data: Any, where: str) -> None:
    """Depth and node limits for an already-built mapping (a JSON body), walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    nodes = chars = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise limit_error(where, f"has more than {MAX_NODES:,} values; the limit is {MAX_NODES:,}")
        if isinstance(node, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                raise limit_error(where, f"nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}")
            children = list(node.items()) if isinstance(node, Mapping) else [(None, v) for v in node]
            for key, value in children:
                chars += len(key) if isinstance(key, str) else 0
                stack.append((value, depth + 1))
        elif isinstance(node, str):
            chars += len(node)
        if chars > MAX_CONFIG_CHARS:
            raise limit_error(where, f"holds more than {MAX_CONFIG_CHARS:,} characters; the limit is {MAX_CONFIG_CHARS:,}")


# ---------------------------------------------------------------------------------------------
# interpolation


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _strings(value, (*path, index))
    elif isinstance(node, str):
        yield path, node


def _integers(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], int]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _integers(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _integers(value, (*path, index))
    elif isinstance(node, int) and not isinstance(node, bool):
        yield path, node


def check_integers(data: Any) -> list[ConfigIssue]:
    """An error for every integer of `data` (a loaded config) that no 64-bit column could hold."""
    issues = []
    for path, value in _integers(data):
        if abs(value) > INT64_MAX:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:12]}…({len(str(value))} digits)"
            issues.append(ConfigIssue(
                dotted(path), f"{shown} is out of range: integers must lie within ±{INT64_MAX} (64-bit)"
            ))
    return issues


def dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in path)


def check_resolvers(data: Any) -> list[ConfigIssue]:
    """An error for every `${name:…}` whose resolver is not in ALLOWED_RESOLVERS."""
    issues = []
    for path, text in _strings(data):
        for match in _UNESCAPED_OPEN.finditer(text):
            call = _RESOLVER.match(text, match.end())
            if call and call.group(1) not in ALLOWED_RESOLVERS:
                issues.append(ConfigIssue(
                    dotted(path),
                    f"resolver {call.group(1)!r} is not available in configs; use one of "
                    f"oc.env, {', '.join(ALLOWED_RESOLVERS)}",
                ))
    return issues


class _SizeBound:
    """Upper bound of each node's size once `${…}` is resolved: a string is its own length plus
    the bound of every node it references plus RESOLVER_OUTPUT_CHARS per resolver call."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.memo: dict[tuple[Any, ...], int] = {}
        self.active: set[tuple[Any, ...]] = set()

    def of(self, node: Any, path: tuple[Any, ...]) -> int:
        if path in self.memo:
            return self.memo[path]
        if path in self.active:  # a cycle: OmegaConf reports it; count nothing twice
            return 0
        self.active.add(path)
        if isinstance(node, dict):
            size = 2 + sum(len(str(k)) + self.of(v, (*path, k)) for k, v in node.items())
        elif isinstance(node, list):
            size = 2 + sum(self.of(v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, str):
            size = self._string(node, path)
        else:
            size = SCALAR_CHARS
        self.active.discard(path)
        self.memo[path] = size
        return size

    def _string(self, text: str, path: tuple[Any, ...]) -> int:
        size = len(text)
        for match in _UNESCAPED_OPEN.finditer(text):
            reference = _REFERENCE.match(text, match.end())
            if reference is None:
                size += RESOLVER_OUTPUT_CHARS
                continue
            target = self._lookup(reference.group(1), path)
            if target is not None:
                size += self.of(*target)
            if size > MAX_RESOLVED_CHARS:
                break
        return size

    def _lookup(self, key: str, path: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]] | None:
        dots = len(key) - len(key.lstrip("."))
        if dots:
            base = path[: max(0, len(path) - dots)]  # `.x` is a sibling, `..x` the parent's sibling
            key = key[dots:]
        else:
            base = ()
        node: Any = self.root
        for part in base:
            node = node[part]
        target = list(base)
        for part in re.split(r"\.|\[(\d+)\]", key):
            if part in (None, ""):
                continue
            if isinstance(node, dict) and part in node:
                node = node[part]
                target.append(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
                target.append(int(part))
            else:
                return None
        return node, tuple(target)


def check_resolved_size(data: dict[str, Any]) -> None:
    """Raise when resolving `${…}` could make the config larger than MAX_RESOLVED_CHARS."""
    bound = _SizeBound(data)
    total = bound.of(data, ())
    if total <= MAX_RESOLVED_CHARS:
        return
    worst = max(
        (path for path, text in _strings(data) if "${" in text), key=lambda p: bound.memo.get(p, 0), default=()
    )
    raise ConfigError([ConfigIssue(
        dotted(worst),
        f"interpolation would expand the config to more than {MAX_RESOLVED_CHARS:,} characters "
        f"(the limit); reference each value once instead of repeating ${{…}} chains",
    )])
