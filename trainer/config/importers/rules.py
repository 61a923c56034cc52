"""The table-driven translation engine shared by the verl, SkyRL and RLinf importers.

Each importer is a list of `Rule`s (source key -> native key + optional converter) plus a small
`finish` function for the values that need arithmetic across keys (batch sizes, device layouts).
The engine walks the foreign file, applies the rules, and turns everything it cannot place into
ConfigIssues. A key of the framework's surface (surface.py: every key of its releases) without a
rule is known but has no effect here: a warning with the value and the reason when it differs from
the release's default. A key in no release is a warning too ("not used by PolicyLab", naming the
closest known key in case it is a typo): frameworks add keys in every release, and a foreign file is
read liberally. Hydra's `???` placeholder is refused while loading (loading.missing_values). `_target_` meta keys are ignored.
Nothing is dropped silently.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.config.importers.surface import Family, Surface
from trainer.config.introspect import models_in
from trainer.config.issues import ConfigIssue
from trainer.config.schema import PipelineConfig, field_status

MISSING_VALUE = "???"  # Hydra / OmegaConf: a value the user must provide
_REFERENCE = re.compile(r"\$\{([\w.\-]+)\}")


class SourceValueError(ValueError):
    """A source value of the wrong type, found while computing derived values; carries the key."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Rule:
    """One documented key of a foreign framework and where its value goes in the native schema.

    - `target` set, `derived` false: the (converted) value is written to the native path.
    - `derived` true: `finish` computes native values from it (target names where it lands).
    - `target` None: no native home; a warning reports the value and `note` unless the value is
      None or equals `implied` (the behaviour the native trainer has anyway).
    `example` is a distinctive valid value used by the tests and the docs.
    """

    source: str
    target: str | None
    example: Any
    convert: Callable[[Any], Any] | None = None
    note: str = ""
    implied: Any = UNSET
    derived: bool = False


@dataclass
class Translation:
    """The state of one translation: the native dict being built and the issues found."""

    raw: dict[str, Any]  # the source file on top of the framework's defaults
    fmt: str
    given: dict[str, Any] = field(default_factory=dict)  # the source file as written
    native: dict[str, Any] = field(default_factory=dict)
    issues: list[ConfigIssue] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)  # native path -> source key that set it
    surface: Surface | None = None  # the framework's keys per release
    family: Family | None = None  # the release family the file belongs to
    variant: str = ""  # its backend tree within the family (e.g. verl's fsdp or megatron trainer)

    def get(self, path: str, default: Any = None) -> Any:
        """The source file's value at a dotted path (None when unset)."""
        found, value = lookup(self.raw, path)
        return value if found and value is not None else default

    def has(self, path: str) -> bool:
        found, value = lookup(self.raw, path)
        return found and value is not None

    def int(self, path: str, default: int = 0) -> int:
        return int(self._number(path, default))

    def float(self, path: str, default: float = 0.0) -> float:
        return float(self._number(path, default))

    def _number(self, path: str, default: float) -> float:
        value = self.get(path, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SourceValueError(path, f"must be a number, got {value!r}")
        return value

    def written(self, path: str) -> bool:
        """Whether the source file sets this key to something other than its release's default (a file
        composed on the framework's own config repeats every default without choosing it)."""
        found, value = lookup(self.given, path)
        return found and value is not None and not self.is_default(path, value)

    def is_default(self, path: str, value: Any) -> bool:
        """Whether `value` is the default of `path` in the file's release family; a default that interpolates
        other keys (`tokenizer_path: ${actor_rollout_ref.model.path}`) is judged with the file's values."""
        if self.surface is None or self.family is None:
            return False
        if isinstance(value, Mapping) and value:  # a section a rule takes whole: every key at its default
            return all(self.is_default(f"{path}.{key}", item) for key, item in leaves(value, {}))
        written = self.surface.raw_default(self.family, self.variant, path)
        if isinstance(written, str) and "${" in written:
            return value == self._interpolate(written)
        parts = path.split(".")
        for cut in range(len(parts) - 1, 0, -1):  # inside a section that defaults to another one
            whole = _REFERENCE.fullmatch(str(self.surface.raw_default(self.family, self.variant, ".".join(parts[:cut]))))
            if whole:
                return lookup(self.given, ".".join([whole.group(1), *parts[cut:]])) == (True, value)
        return self.surface.is_default(self.family, self.variant, path, value)

    def _interpolate(self, text: str) -> Any:
        whole = _REFERENCE.fullmatch(text)
        if whole:
            return lookup(self.given, whole.group(1))[1]
        return _REFERENCE.sub(lambda m: str(lookup(self.given, m.group(1))[1]), text)

    def required(self, path: str, what: str = "", example: Any = None) -> None:
        """A value the framework requires and the file leaves unset (or as `???`), with the override that sets it."""
        override = f"; e.g. with the override {path}={'<value>' if example is None else example}"
        self.error(path, f"required: set {path}{f' ({what})' if what else ''}{override}")

    def set(self, path: str, value: Any, source: str) -> None:
        """Write a native value; a second source disagreeing with the first is reported and the first wins,
        unless only the second is set to other than its release default (the file chose it)."""
        found, current = lookup(self.native, path)
        if found and current != value and path in self.origin:
            first = self.origin[path]
            if self.written(first) or not self.written(source):
                self.warn(source, f"= {value!r} conflicts with {first} (= {current!r}), which sets {path}; "
                          f"kept {current!r}")
                return
            self.origin[path] = source  # the file chose this one; the other is its release's default
        set_path(self.native, path, value)
        self.origin.setdefault(path, source)

    def error(self, path: str, message: str) -> None:
        self.issues.append(ConfigIssue(path, message, "error"))

    def warn(self, path: str, message: str) -> None:
        self.issues.append(ConfigIssue(path, message, "warning"))


def lookup(tree: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def pop_path(tree: dict[str, Any], path: str) -> Any:
    parts = path.split(".")
    found, parent = lookup(tree, ".".join(parts[:-1])) if len(parts) > 1 else (True, tree)
    if found and isinstance(parent, dict):
        return parent.pop(parts[-1], None)
    return None


def leaves(raw: Mapping[str, Any], rules: Mapping[str, Rule], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every key in `raw`; a key named by a rule is one leaf even if it holds a
    mapping, and mappings no rule reaches into are reported whole (as one unknown key)."""
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if path in rules or not isinstance(value, Mapping) or not value:
            yield path, value
        else:
            yield from leaves(value, rules, f"{path}.")


def closest_key(path: str, known: Sequence[str]) -> str | None:
    """The documented key nearest to a misspelt one: same parent first, then anywhere."""
    parent, _, last = path.rpartition(".")
    siblings = [k for k in known if k.rpartition(".")[0] == parent]
    names = {k.rpartition(".")[2]: k for k in siblings}
    close = difflib.get_close_matches(last, list(names), n=1, cutoff=0.6)
    if close:
        return names[close[0]]
    close = difflib.get_close_matches(path, list(known), n=1, cutoff=0.6)
    return close[0] if close else None


def apply_rules(t: Translation, rules: Sequence[Rule]) -> None:
    """Map every key of `t.raw` with its rule; known keys without one and unknown keys are warnings."""
    by_source = {rule.source: rule for rule in rules}
    known = sorted({*by_source, *(t.surface.key_set if t.surface else ())})
    for path, value in leaves(t.raw, by_source):
        if path.rpartition(".")[2] == "_target_":
            continue  # Hydra's instantiation meta key: which class the framework builds, no setting
        if value == MISSING_VALUE:  # a file read through loading never gets here (loading.missing_values)
            t.required(path, f"{t.fmt} leaves it as ??? for you to fill in")
            continue
        rule = by_source.get(path)
        if rule is None:
            if t.surface is not None and t.surface.known(path):
                _without_effect(t, path, value)
                continue
            if any(k.startswith(f"{path}.") for k in known) and (value is None or value == {}):
                continue  # an empty section such as `critic:` with nothing in it
            if value is not None:  # an unknown key left unset chooses nothing
                unknown_key(t, path, value, known)
            continue
        if rule.derived or value is None:
            continue
        if rule.target is None:
            if (rule.implied is UNSET or value != rule.implied) and not t.is_default(path, value):
                reason = rule.note or "no native equivalent"
                t.warn(path, f"= {_short(value)} not imported: {reason}")
            continue
        if t.is_default(path, value) and inactive_native(rule.target):
            continue  # the release's default, for a native field without effect: nothing chosen, nothing to say
        try:
            converted = rule.convert(value) if rule.convert else value
        except (ValueError, TypeError) as exc:
            table = getattr(rule.convert, "table", None)
            fix = f"; to run this file with {next(iter(table))} instead, use the override {path}={next(iter(table))}" \
                if table else ""
            t.error(path, f"{exc}{fix}")
            continue
        t.set(rule.target, converted, path)


def inactive_native(path: str) -> bool:
    """Whether the native field at a dotted path is marked import_only or planned (schema.Inactive);
    paths through a strategy_config (whose model depends on the strategy) count as active."""
    model: Any = PipelineConfig
    parts = path.split(".")
    index = 0
    while index < len(parts):
        name = parts[index]
        info = model.model_fields.get(name) if model is not None else None
        if info is None or name == "strategy_args":
            return False
        if index == len(parts) - 1:
            return field_status(model, name)[0] != "acts"
        models, is_dict = models_in(info.annotation)
        model = models[0] if len(models) == 1 else None
        index += 2 if is_dict else 1
    return False


def unknown_key(t: Translation, path: str, value: Any, known: Sequence[str]) -> None:
    """A key of no release this importer knows: a warning naming it (and the nearest known key, in case it is a
    typo), never an error. Frameworks add keys in every release; a foreign file is read liberally."""
    close = closest_key(path, known)
    hint = f"; did you mean {close}?" if close else ""
    t.warn(path, f"= {_short(value)} not used by PolicyLab: unknown key for {t.fmt} ({path.rpartition('.')[2]!r} is "
           f"not a {t.fmt} setting of any release this importer knows){hint}")


def _without_effect(t: Translation, path: str, value: Any) -> None:
    """A key of the framework without a native home: reported when set to other than its default."""
    if value is None or value == {} or t.is_default(path, value):
        return
    assert t.surface is not None
    t.warn(path, f"= {_short(value)} not imported: {t.surface.reason(path)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------------------------
# converters shared by the importers


def choice(table: Mapping[Any, Any], what: str) -> Callable[[Any], Any]:
    """A converter from the foreign names of `what` to native names; other values are errors."""

    def convert(value: Any) -> Any:
        key = value.lower() if isinstance(value, str) else value
        if key not in table:
            valid = ", ".join(str(k) for k in table)
            raise ValueError(f"{value!r} is not a {what} this importer knows; valid: {valid}")
        return table[key]

    renamed = [f"{k} → {v}" for k, v in table.items() if k != v]
    same = [str(k) for k, v in table.items() if k == v]
    parts = ([", ".join(renamed)] if renamed else []) + ([f"same names: {', '.join(same)}"] if same else [])
    convert.__doc__ = "; ".join(parts)
    convert.table = dict(table)  # type: ignore[attr-defined]  # read back by importers.engines (which name means X)
    return convert


DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
          "float32": "fp32", "fp32": "fp32", "float": "fp32"}
to_dtype = choice(DTYPES, "dtype")


def devices(start: int, count: int) -> list[int]:
    return list(range(start, start + count))
