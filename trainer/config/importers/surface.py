"""What each release family of a framework accepts: every config key with its default, as data.

A `Surface` lists a framework's release families (oldest first). Each family is a flat table
`dotted key -> default`, the union of its backends' variants (verl's FSDP and Megatron trees), built
as the previous family plus what the next release added, changed or removed. The importers use it
to tell the three kinds of key apart:

- a key some rule maps: it acts (rules.py);
- a key in a family's table (or under an open section such as `engine_kwargs.vllm`) without a rule:
  known, without effect here; set to something other than that family's default it is a warning
  with the reason from `notes`;
- any other key: unknown to every release here, a warning ("not used by PolicyLab") naming the nearest
  known key in case it is a typo; a foreign file is read liberally (issue 31).

The family of a file is the one that knows most of its keys (the newest one on ties, then the one
whose defaults the file repeats most), so a v0.3 file is judged against v0.3's defaults. `trees`
rebuild a family's default config, which composition uses when a file relies on its framework's
own config (verl's `defaults: [ppo_trainer, _self_]`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

Flat = dict[str, Any]


def under(prefix: str, keys: Mapping[str, Any]) -> Flat:
    """`{prefix.key: default}` for a block of keys (a nested section written flat)."""
    return {f"{prefix}.{key}" if prefix else key: value for key, value in keys.items()}


def evolve(previous: Flat, *, add: Mapping[str, Any] = (), drop: Iterable[str] = ()) -> Flat:
    """The next release: `add` holds new keys and changed defaults; `drop` removed keys (a name
    ending in `.` removes a whole section)."""
    out = dict(previous)
    for gone in drop:
        for key in [k for k in out if k == gone or (gone.endswith(".") and k.startswith(gone))]:
            del out[key]
    out.update(add)
    return out


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf; an empty mapping is a leaf."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{path}.")
        else:
            yield path, value


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Family:
    """One release family: `variants` are the default trees of its backends (e.g. fsdp, megatron),
    each a flat table; `keys` is their union."""

    name: str
    releases: str
    variants: Mapping[str, Flat]

    @functools.cached_property
    def keys(self) -> Flat:
        out: Flat = {}
        for table in self.variants.values():
            for key, value in table.items():
                out.setdefault(key, value)
        return out


@dataclass(frozen=True)
class BuiltinConfig:
    """A config of the framework that composition may name (`ppo_trainer`, `actor/dp_actor`): the
    subtree at `section` of a variant's default tree ("" = the whole tree)."""

    variant: str
    section: str = ""
    package: str | None = None  # where it lands when its file says so (`# @package environment.skyrl_gym`)


@dataclass(frozen=True, eq=False)
class Surface:
    framework: str
    families: tuple[Family, ...]
    notes: Mapping[str, str]  # key prefix -> why a key without a rule has no effect here
    open_sections: Mapping[str, str] = field(default_factory=dict)  # prefix -> why any key below is fine
    builtins: Mapping[str, BuiltinConfig] = field(default_factory=dict)
    variant_choice: Mapping[str, str] = field(default_factory=dict)  # a choice (model_engine, strategy) -> variant
    variant_key: str = ""  # the key whose value picks the variant (verl: the actor's strategy)

    def family(self, name: str) -> Family:
        return next(f for f in self.families if f.name == name)

    @property
    def newest(self) -> Family:
        return self.families[-1]

    @functools.cached_property
    def key_set(self) -> frozenset[str]:
        """Every key of every family."""
        return frozenset(key for family in self.families for key in family.keys)

    def in_open_section(self, path: str) -> str | None:
        for prefix in self.open_sections:
            if path == prefix or path.startswith(f"{prefix}.") or _wild_match(prefix, path):
                return prefix
        return None

    def known(self, path: str) -> bool:
        return path in self.key_set or self.in_open_section(path) is not None

    def default(self, family: Family, path: str) -> tuple[bool, Any]:
        """The family's default of `path`, interpolation resolved (or the newest family's that has it);
        the first variant's where the backends differ."""
        for candidate in (family, *reversed(self.families)):
            for table in resolved_defaults(self, candidate.name).values():
                if path in table:
                    return True, table[path]
        return False, None

    def raw_default(self, family: Family, variant: str, path: str) -> Any:
        """The default of `path` as the family's table writes it (interpolation unresolved), or None."""
        for table in (family.variants.get(variant, {}), *family.variants.values()):
            if path in table:
                return table[path]
        return None

    def is_default(self, family: Family, variant: str, path: str, value: Any) -> bool:
        """Whether `value` is the default of `path` in the file's backend tree (verl's FSDP or Megatron
        trainer), or in the family's other trees when that one lacks the key; a key the family lacks is
        judged by the newest family that has it."""
        for candidate in (family, *reversed(self.families)):
            tables = resolved_defaults(self, candidate.name)
            own = _at(tables.get(variant, {}), path)
            if own is not _ABSENT:
                return own == value
            others = [found for t in tables.values() if (found := _at(t, path)) is not _ABSENT]
            if others:
                return value in others
        return False

    def reason(self, path: str) -> str:
        """Why a known key without a rule has no effect: the longest matching note."""
        notes = {**self.open_sections, **self.notes}
        matching = [p for p in notes if path == p or path.startswith(f"{p}.") or _wild_match(p, path)]
        if not matching:
            return f"a {self.framework} setting with no native counterpart"
        return notes[max(matching, key=len)]

    def detect(self, flat: Mapping[str, Any]) -> Family:
        """The family that knows most of the keys, then the newest; a whole default tree (a file that sets
        at least half of a family's keys, e.g. one composed on `ppo_trainer`) goes to the family whose
        defaults it repeats most."""
        keys = [k for k in flat if not k.endswith("_target_") and self.in_open_section(k) is None]

        def score(item: tuple[int, Family]) -> tuple[int, int, int]:
            index, family = item
            table = family.keys
            known = sum(1 for k in keys if k in table)
            whole = 2 * len(keys) >= len(table)
            agree = sum(1 for k in keys if k in table and table[k] == flat[k]) if whole else 0
            return known, agree, index

        return max(enumerate(self.families), key=score)[1]

    def tree(self, family: Family, variant: str) -> dict[str, Any]:
        return nest(family.variants[variant])

    def variant_of(self, family: Family, flat: Mapping[str, Any]) -> str:
        """The backend tree (e.g. fsdp or megatron) the file chose with `variant_key`, else the one whose keys
        it uses most, else the first."""
        chosen = self.variant_choice.get(str(flat.get(self.variant_key, "")))
        if chosen in family.variants:
            return chosen

        def coverage(item: tuple[int, str]) -> tuple[int, int]:
            index, name = item
            return sum(1 for k in flat if k in family.variants[name]), -index

        return max(enumerate(family.variants), key=coverage)[1]

    def builtin(self, name: str, primary: Mapping[str, Any],
                choices: Mapping[str, Any]) -> tuple[dict[str, Any], str | None] | None:
        """The framework's config `name` for the family the primary file belongs to, and the package its
        file header names (None: where the defaults entry puts it)."""
        spec = self.builtins.get(name)
        if spec is None:
            return None
        family = self.detect(dict(flatten(_without_meta(primary))))
        variant = spec.variant
        for choice in choices.values():
            variant = self.variant_choice.get(str(choice), variant)
        if variant not in family.variants:
            variant = next(iter(family.variants))
        tree = self.tree(family, variant)
        for part in [p for p in spec.section.split(".") if p]:
            tree = tree.get(part, {})
        return tree, spec.package


@functools.cache
def resolved_defaults(surface: Surface, family_name: str) -> dict[str, Flat]:
    """Each backend tree of a family with `${…}` between its own keys resolved, as verl/SkyRL compose
    them (`critic.ppo_mini_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}` is 256)."""
    out: dict[str, Flat] = {}
    for name, variant in surface.family(family_name).variants.items():
        try:
            tree = OmegaConf.to_container(OmegaConf.create(nest(variant)), resolve=True)
        except OmegaConfBaseException:
            tree = nest(variant)
        out[name] = dict(flatten(tree))  # type: ignore[arg-type]
    return out


_ABSENT = object()


def _at(table: Flat, path: str) -> Any:
    """The default at `path`: a flat key, or the nested section below it (a rule may take a whole section)."""
    if path in table:
        return table[path]
    below = {k[len(path) + 1:]: v for k, v in table.items() if k.startswith(f"{path}.")}
    return nest(below) if below else _ABSENT


def _wild_match(pattern: str, path: str) -> bool:
    """`*` in a note prefix stands for one key part (e.g. `*.profiler`)."""
    if "*" not in pattern:
        return False
    parts, target = pattern.split("."), path.split(".")
    for start in range(len(target) - len(parts) + 1):
        window = target[start:start + len(parts)]
        if all(p in ("*", t) for p, t in zip(parts, window, strict=True)) and (start == 0 or parts[0] == "*"):
            return True
    return False


def _without_meta(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in ("defaults", "hydra")}
