"""Turn a YAML file, YAML text or mapping (plus command-line overrides) into a plain resolved dict.

A `str` is always YAML text and a `Path` is a file: only the trainer's command line passes a Path
(the web side never names a file). Every input is bounded before it is parsed (trainer.config.bounds).

Order of operations, as in Hydra/ROLL:
1. parse YAML (OmegaConf's loader, so `1e-6` is a float);
2. compose the `defaults:` list as Hydra does (configs and `group@package: option` entries with
   `${group}` choices, `override`, `_self_` ordering, `hydra.searchpath`); a config that is not on
   disk comes from the frameworks' built-in configs (trainer.config.importers.builtin), so a single
   pasted file composes; `${oc.select:…}` and `${now:…}` are rewritten to what they select;
3. apply overrides `a.b=c`, `+a.b=c`, `++a.b=c`, `~a.b` (values parsed as YAML); a key still `???`
   (Hydra's "set me on the command line") is refused here, one line per key with the override;
4. `${oc.env:VAR,default}`: substituted from `env` in the trainer; kept as written when `env` is None
   (the web server never reads its own environment into a config);
5. resolve the other `${...}` interpolation (`${response_length}`, `${subtract:a,b}` …); a team secret's
   `${secret:NAME}` stays as written everywhere (trainer.config.secrets resolves it where it is used);
6. drop helper keys: top-level keys that `defaults:` layers introduced or that interpolations read,
   unless they are native fields or a foreign framework's sections (and `hydra:`);
7. parse `device_mapping` expressions with the allow-list parser (never evaluated).
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import fnmatch
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel

from trainer.config import bounds
from trainer.config.device_mapping import DeviceMappingError, parse_device_mapping
from trainer.config.formats import FOREIGN_TOP_LEVEL_KEYS
from trainer.config.issues import ConfigError, ConfigIssue
from trainer.config.merge import deep_merge
from trainer.config.presets import DEEPSPEED_PRESETS
from trainer.config.secrets import keep_reference, misplaced_reference_issues, plain_secret_issues

MAX_DEFAULTS_DEPTH = 8
# Top-level sections of verl / SkyRL / RLinf files (their defaults files may hold them).
_KEY_RE = re.compile(r"^[A-Za-z_][\w\-]*(\.[\w\-]+)*$")
ENV_ALLOW_VAR = "POLICYLAB_CONFIG_ENV_ALLOW"
NEVER_READ_PREFIX = "RAY_AUTH_"  # the Ray cluster's credential, whatever a deployment allows (decision 0047)
MAX_NUMBER = 1e18  # arithmetic resolvers refuse results past this (no 2**(2**30) from nested multiply)


def _num(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        value = float(value)
    return value


def _bounded(fn: Any) -> Any:
    def resolver(*args: Any) -> Any:
        value = fn(*args)
        if not isinstance(value, bool) and not (math.isfinite(value) and abs(value) <= MAX_NUMBER):
            raise ValueError(f"result {value} is outside ±{MAX_NUMBER:g}")
        return value

    return resolver


def _register_resolvers() -> None:
    """Arithmetic resolvers RLinf uses (`${subtract:${runner.seq_length},${data.max_prompt_length}}`)."""
    resolvers = {
        "add": lambda *xs: sum(_num(x) for x in xs),
        "subtract": lambda a, b: _num(a) - _num(b),
        "multiply": lambda *xs: _product([_num(x) for x in xs]),
        "int_div": lambda a, b: int(_num(a) // _num(b)),
        "divide": lambda a, b: _num(a) / _num(b),
        "not": lambda x: not _truthy(x),
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_resolver(name, _bounded(fn), annotation_validation="off")
    if not OmegaConf.has_resolver("secret"):  # `${secret:NAME}` stays a reference (trainer.config.secrets)
        OmegaConf.register_resolver("secret", keep_reference, annotation_validation="off")


def _product(values: list[int | float]) -> int | float:
    out: int | float = 1
    for v in values:
        out *= v
    return out


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


_register_resolvers()


# ---------------------------------------------------------------------------------------------
# reading


class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML 1.1 safe loader that also reads `1e-6` (no dot) as a float, as OmegaConf does."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _plain(node: Any) -> Any:
    """Deep copy of a mapping into plain dicts and lists."""
    if isinstance(node, Mapping):
        return {key: _plain(value) for key, value in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(value) for value in node]
    return node


def _parse_yaml(text: str, where: str) -> dict[str, Any]:
    bounds.check_yaml_text(text, where, _YamlLoader)
    try:
        data = yaml.load(text, Loader=_YamlLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError([ConfigIssue("", f"{where}: not valid YAML: {detail[:300]}")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        hint = " (a config is YAML text, never a file name)" if isinstance(data, str) and "\n" not in text.strip() else ""
        raise ConfigError([ConfigIssue("", f"{where}: the top level must be a mapping of keys to values{hint}")])
    return data


def _read(source: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path | None, str]:
    if isinstance(source, BaseModel):  # e.g. a PipelineConfig being re-validated
        from trainer.config.export import config_to_yaml  # escapes literal `${`

        return _parse_yaml(config_to_yaml(source), "<config>"), None, "<config>"
    if isinstance(source, Mapping):
        bounds.check_tree(source, "<mapping>")
        return _plain(source), None, "<mapping>"
    if isinstance(source, Path):
        path = source
        if not path.is_file():
            raise ConfigError([ConfigIssue("", f"config file not found: {path}")])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([ConfigIssue("", f"cannot read {path}: {exc}")]) from None
        return _parse_yaml(text, str(path)), path.resolve().parent, str(path)
    if not isinstance(source, str):
        raise ConfigError([ConfigIssue("", f"expected YAML text, a mapping or a Path, got {type(source).__name__}")])
    return _parse_yaml(source, "<text>"), None, "<text>"


# ---------------------------------------------------------------------------------------------
# defaults


@dataclass(frozen=True)
class DefaultsEntry:
    """One entry of a Hydra `defaults:` list.

    `- name` / `- dir/name@pkg` is a config (group None); `- group@pkg: option` a config group
    choice (option None: no config); `override` replaces the choice another list made;
    `optional` entries may be missing."""

    where: str
    name: str | None
    group: str | None = None
    package: str | None = None
    override: bool = False
    optional: bool = False
    is_self: bool = False

    @property
    def key(self) -> str:
        """What an `override` entry matches: the group (and its package when one is written)."""
        group = (self.group or "").lstrip("/")
        return f"{group}@{self.package}" if self.package else group


def parse_defaults_entry(entry: Any, where: str) -> DefaultsEntry | ConfigIssue:
    if entry == "_self_":
        return DefaultsEntry(where, None, is_self=True)
    if isinstance(entry, str) and entry.strip():
        name, _, package = entry.strip().partition("@")
        return DefaultsEntry(where, name, package=package or None)
    if isinstance(entry, Mapping) and len(entry) == 1:
        (head, option), = entry.items()
        words = str(head).split()
        flags = set(words[:-1])
        if words and flags <= {"override", "optional"} and (option is None or isinstance(option, str | list)):
            group, _, package = words[-1].partition("@")
            return DefaultsEntry(where, option, group=group, package=package or None,
                                 override="override" in flags, optional="optional" in flags)
    return ConfigIssue(where, f"entry {entry!r} is not a defaults entry: write a config name (../config/"
                              "deepspeed_zero2@_here_), `group@package: option`, `override group: option` or _self_")


def _package_path(parent: str, written: str | None, implied: str) -> str:
    """Where a layer lands: Hydra packages are relative to the containing config's package."""
    package = implied if written is None else written
    if package in ("_here_", ""):
        return parent
    if package == "_global_" or package.startswith("_global_."):
        return package.removeprefix("_global_").lstrip(".")
    return f"{parent}.{package}".strip(".") if parent else package


def _place(layer: dict[str, Any], package: str) -> dict[str, Any]:
    for part in reversed([p for p in package.split(".") if p]):
        layer = {part: layer}
    return layer


def _header_package(text: str) -> str | None:
    """A `# @package X` line at the top of a config file."""
    for line in text.splitlines()[:5]:
        match = re.match(r"\s*#\s*@package\s+(\S+)", line)
        if match:
            return match.group(1)
    return None


_CHOICE_RE = re.compile(r"\$\{\s*([\w/\-]+)\s*\}")


@dataclass
class _Composer:
    """Hydra's defaults-list composition over YAML files, with the frameworks' own configs built in.

    Config files are looked up next to the file that names them, then under `hydra.searchpath`
    folders; a config that is not on disk comes from trainer.config.importers.builtin (ROLL's
    deepspeed/env helper files, verl's ppo_trainer, SkyRL's deepspeed_config, RLinf's training
    backends) so that a single pasted file composes as it would in its framework."""

    primary: dict[str, Any]
    search_dirs: list[Path]
    issues: list[ConfigIssue]
    layer_keys: set[str] = field(default_factory=set)  # top-level keys that defaults layers introduced
    overrides: dict[str, Any] = field(default_factory=dict)
    choices: dict[str, str] = field(default_factory=dict)

    def expand(self, raw: dict[str, Any], here: Path | None, package: str, depth: int) -> dict[str, Any]:
        """`raw` (a config at `package`) merged with its defaults list, as a tree rooted at the top."""
        defaults = raw.pop("defaults", None)
        raw.pop("hydra", None)
        body = _place(raw, package)
        if defaults is None:
            return body
        if not isinstance(defaults, list):
            self.issues.append(ConfigIssue("defaults", "must be a list of config names (e.g. "
                                                       "../config/deepspeed_zero2@_here_) or group choices"))
            return body
        entries = []
        for index, item in enumerate(defaults):
            parsed = parse_defaults_entry(item, f"defaults.{index}" if depth == 0 else "defaults")
            if isinstance(parsed, ConfigIssue):
                self.issues.append(parsed)
            else:
                entries.append(parsed)
        for entry in entries:  # choices and overrides first: `${group}` in an option names another choice
            if entry.override:
                self.overrides.setdefault(entry.key, entry.name)
            elif entry.group and isinstance(entry.name, str):
                self.choices.setdefault(entry.group.lstrip("/").split("/")[-1], entry.name)
        merged: dict[str, Any] = {}
        self_done = False
        for entry in entries:
            if entry.is_self:
                merged = deep_merge(merged, body)
                self_done = True
            elif not entry.override:
                for layer in self._layers(entry, here, package, depth):
                    self.layer_keys.update(layer)
                    merged = deep_merge(merged, layer)
        return merged if self_done else deep_merge(merged, body)

    def _layers(self, entry: DefaultsEntry, here: Path | None, package: str, depth: int) -> list[dict[str, Any]]:
        if entry.group is not None and entry.group.lstrip("/").split("/")[0] == "hydra":
            return []  # Hydra's own settings (job_logging, launcher …) do not shape the config
        options = self.overrides.get(entry.key, entry.name) if entry.group else entry.name
        if options is None:
            return []
        out = []
        for option in options if isinstance(options, list) else [options]:
            name = self._interpolate(str(option), entry)
            if name is None:
                continue
            path = f"{entry.group}/{name}" if entry.group else name
            implied = ".".join(p for p in path.split("/")[:-1] if p not in ("..", "."))
            layer = self._load(path, entry, here, _package_path(package, entry.package, implied), depth)
            if layer is not None:
                out.append(layer)
        return out

    def _interpolate(self, option: str, entry: DefaultsEntry) -> str | None:
        def choice(match: re.Match[str]) -> str:
            group = match.group(1).split("/")[-1]
            value = self.overrides.get(group, self.choices.get(group))
            if not isinstance(value, str):
                raise KeyError(group)
            return value

        try:
            return _CHOICE_RE.sub(choice, option)
        except KeyError as exc:
            self.issues.append(ConfigIssue(entry.where, f"{option!r} names the choice of group {exc.args[0]}, which "
                                                        "no defaults entry makes; skipped", "warning"))
            return None

    def _load(self, path: str, entry: DefaultsEntry, here: Path | None, package: str,
              depth: int) -> dict[str, Any] | None:
        if depth >= MAX_DEFAULTS_DEPTH:
            self.issues.append(ConfigIssue(entry.where, f"defaults nested deeper than {MAX_DEFAULTS_DEPTH} levels"))
            return None
        found = self._find(path, here)
        if found is not None:
            try:
                text = found.read_text(encoding="utf-8")
                layer = _parse_yaml(text, str(found))
            except ConfigError as exc:
                self.issues.extend(ConfigIssue(entry.where, i.message) for i in exc.issues)
                return None
            except (OSError, UnicodeDecodeError) as exc:
                self.issues.append(ConfigIssue(entry.where, f"cannot read {found}: {exc}"))
                return None
            header = _header_package(text)
            if header not in (None, "_group_"):  # _group_: where the entry put it anyway
                package = _package_path("", header, "")
            return self.expand(layer, found.parent, package, depth + 1)
        from trainer.config.importers.builtin import builtin_config  # the frameworks' configs, as data

        builtin = builtin_config(path, self.primary, self.overrides)
        if builtin is not None:
            layer, header = builtin
            return self.expand(layer, None, package if header is None else _package_path("", header, ""), depth + 1)
        if not entry.optional:
            self.issues.append(ConfigIssue(entry.where, f"defaults entry {path!r} not found next to the config "
                                                        "nor built in; skipped", "warning"))
        return None

    def _find(self, path: str, here: Path | None) -> Path | None:
        roots = ([here] if here is not None and not path.startswith("/") else []) + self.search_dirs
        for root in roots:
            for candidate in (root / path.lstrip("/"), root / f"{path.lstrip('/')}.yaml",
                              root / f"{path.lstrip('/')}.yml"):
                if candidate.is_file():
                    return candidate
        return None


def _search_dirs(raw: Mapping[str, Any], base_dir: Path | None) -> list[Path]:
    """`hydra.searchpath` folders (file://…, relative to the working directory or the config) for a file
    given on the command line; pkg:// paths and text sources rely on the built-in configs."""
    hydra = raw.get("hydra")
    paths = hydra.get("searchpath") if isinstance(hydra, Mapping) else None
    if base_dir is None or not isinstance(paths, list):
        return []
    dirs = []
    for item in paths:
        if isinstance(item, str) and item.startswith("file://"):
            folder = Path(item.removeprefix("file://"))
            dirs += [d for d in ([folder] if folder.is_absolute() else [Path.cwd() / folder, base_dir / folder])
                     if d.is_dir()]
    return dirs


def compose(raw: dict[str, Any], base_dir: Path | None, issues: list[ConfigIssue]) -> tuple[dict[str, Any], set[str]]:
    """Merge the `defaults:` list of `raw` into it. Returns the merged dict and the top-level keys that
    defaults layers introduced (helper holders such as `deepspeed_zero2`, or a framework's sections)."""
    composer = _Composer(primary=copy.deepcopy(raw), search_dirs=_search_dirs(raw, base_dir), issues=issues)
    merged = composer.expand(raw, base_dir, "", 0)
    return merged, composer.layer_keys


# ---------------------------------------------------------------------------------------------
# overrides


def parse_override_value(text: str) -> Any:
    """`key=value` values are YAML scalars or lists (`1e-6` counts as a float, as in OmegaConf);
    an empty value is the empty string, as in Hydra."""
    if not text.strip():
        return ""
    bounds.check_yaml_text(text, "override value", _YamlLoader)
    try:
        return yaml.load(text, Loader=_YamlLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one Hydra-style override in place; raises ConfigError naming the override."""
    text = override.strip()
    if text.startswith("~"):
        key = text[1:].split("=", 1)[0]
        _check_key(key, override)
        parent, last = _walk_to_parent(data, key, override, create=False)
        if parent is None or last not in parent:
            raise ConfigError([ConfigIssue(key, f"override {override!r}: cannot delete, the key is not set")])
        del parent[last]
        if key.count(".") == 1 and key.startswith("rewards."):
            _drop_domain(data, last)
        return
    body = text.lstrip("+")
    if "=" not in body:
        raise ConfigError(
            [ConfigIssue("", f"override {override!r} must look like key=value, +key=value or ~key")]
        )
    key, value = body.split("=", 1)
    key = key.strip()
    _check_key(key, override)
    parent, last = _walk_to_parent(data, key, override, create=True)
    assert parent is not None
    parent[last] = parse_override_value(value)


def _drop_domain(data: dict[str, Any], domain: str) -> None:
    """`~rewards.<domain>` also takes the domain out of actor_train's domain_interleave_probs (ROLL scores a domain's
    prompts with the reward of that name) and re-normalises the others to sum to 1, keeping their proportions."""
    args = data.get("actor_train", {}).get("data_args") if isinstance(data.get("actor_train"), dict) else None
    probs = args.get("domain_interleave_probs") if isinstance(args, dict) else None
    if not isinstance(probs, dict) or domain not in probs:
        return
    rest = {d: p for d, p in probs.items() if d != domain}
    total = sum(p for p in rest.values() if isinstance(p, (int, float)))
    if rest and total > 0 and all(isinstance(p, (int, float)) for p in rest.values()):
        args["domain_interleave_probs"] = {d: p / total for d, p in rest.items()}
    else:
        args.pop("domain_interleave_probs")  # no domain left to split a batch between


def _check_key(key: str, override: str) -> None:
    if key.count(".") >= bounds.MAX_DEPTH:
        raise ConfigError([ConfigIssue("", f"override {override[:80]!r}…: deeper than {bounds.MAX_DEPTH} levels")])
    if not _KEY_RE.match(key):
        raise ConfigError([ConfigIssue("", f"override {override!r}: {key!r} is not a dotted key like a.b.c")])


def _walk_to_parent(
    data: dict[str, Any], key: str, override: str, *, create: bool
) -> tuple[dict[str, Any] | None, str]:
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict):
            return None, parts[-1]
        if part not in node or node[part] is None:
            if not create:
                return None, parts[-1]
            node[part] = {}
        if isinstance(node[part], str):
            node[part] = _section_of_interpolation(data, node[part])
        node = node[part]
        if not isinstance(node, dict):
            prefix = ".".join(parts[: i + 1])
            raise ConfigError([ConfigIssue(prefix, f"override {override!r}: {prefix} is a value, not a section")])
    return node, parts[-1]


_WHOLE_INTERPOLATION = re.compile(r"^\$\{([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)\}$")


def _section_of_interpolation(data: dict[str, Any], value: str) -> Any:
    """A copy of the section `value` interpolates when it is exactly `${a.b}` of a section (ROLL's
    `SimpleSokoban: ${custom_env.SimpleSokoban}`), so an override can reach into it; else `value`."""
    match = _WHOLE_INTERPOLATION.match(value)
    node: Any = data
    for part in match.group(1).split(".") if match else ():
        node = node.get(part) if isinstance(node, dict) else None
    return copy.deepcopy(node) if match and isinstance(node, dict) else value


# ---------------------------------------------------------------------------------------------
# placeholders

MISSING = "???"  # Hydra / OmegaConf: a value the file leaves for the command line


def missing_values(tree: Mapping[str, Any]) -> list[ConfigIssue]:
    """One error per key the file (after composition and overrides) leaves as `???`, named by that key and
    with the override that sets it; interpolations that read it are not reported (they follow from it)."""
    from trainer.config.importers import suggested_value  # the importers' rule tables: imported when needed

    issues = []
    for path, value in _leaves(tree, ""):
        if value == MISSING:
            example = suggested_value(path)
            issues.append(ConfigIssue(path, f"required: ??? is left for you to set; set it, e.g. with the override "
                                            f"{path}={'<value>' if example is None else example}"))
    return issues


def _leaves(node: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(node, Mapping):
        return [leaf for key, value in node.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    if isinstance(node, list):
        return [leaf for i, value in enumerate(node) for leaf in _leaves(value, f"{prefix}{i}.")]
    return [(prefix[:-1], node)]


# ---------------------------------------------------------------------------------------------
# resolution


_SELECT = re.compile(r"\$\{oc\.select:\s*([\w.\-]+)\s*(?:,\s*((?:\$\{[^{}]*\}|[^{}])*?))?\s*\}")
_NOW = re.compile(r"\$\{now:([^{}]*)\}")
_REFERENCE = re.compile(r"(?<!\\)\$\{\s*([A-Za-z_][\w\-]*)\s*[.}\[]")


def rewrite_hydra_resolvers(tree: dict[str, Any]) -> dict[str, Any]:
    """Hydra's `${oc.select:key,default}` becomes `${key}` when the key exists and the default otherwise
    (so the size bounds see a plain reference), and `${now:%Y%m%d}` the current time in that format."""

    def rewrite(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: rewrite(v, (*path, str(k))) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v, path) for v in node]
        if not isinstance(node, str) or ("${oc.select:" not in node and "${now:" not in node):
            return node
        whole = _SELECT.fullmatch(node.strip())
        if whole and _select_target(tree, path, whole.group(1)) is None:
            default = whole.group(2)
            return None if default is None else parse_override_value(default.strip().strip("'\""))
        text = _SELECT.sub(lambda m: _select_text(tree, path, m), node)
        return _NOW.sub(lambda m: datetime.now().strftime(m.group(1)), text)

    return rewrite(tree, ())


def _select_target(tree: dict[str, Any], path: tuple[str, ...], key: str) -> str | None:
    """The absolute dotted key `key` names from the node at `path` (`.x` is a sibling), if it exists."""
    if key.startswith("."):
        parent = list(path[:-1])
        stripped = key[1:]
        while stripped.startswith("."):
            parent, stripped = parent[:-1], stripped[1:]
        key = ".".join([*parent, stripped])
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return key


def _select_text(tree: dict[str, Any], path: tuple[str, ...], match: re.Match[str]) -> str:
    target = _select_target(tree, path, match.group(1))
    if target is not None:
        return "${" + target + "}"
    default = match.group(2)
    return "null" if default is None else default.strip().strip("'\"")


def referenced_top_level_keys(tree: Mapping[str, Any]) -> set[str]:
    """Top-level names that `${name…}` interpolations read: ROLL's helper variables (e.g.
    `max_actions_per_traj` used by custom_envs), dropped after resolution unless they are real fields."""
    return {m.group(1) for text in _interpolations(tree) for m in _REFERENCE.finditer(text)} & set(tree)


def derived_helper_keys(tree: Mapping[str, Any]) -> set[str]:
    """Top-level keys whose value is text built from `${…}` and that nothing reads, such as ROLL's
    `model_name: ${exp_name}-${now:%Y%m%d}`: helper variables of the file, which the framework ignores too."""
    return {key for key, value in tree.items() if isinstance(value, str) and _ENV_OPEN_ANY.search(value)}


HELPER_NOTE = "not used by PolicyLab: not a setting, and its value only combines other values"


def _helper_warning(key: str) -> ConfigIssue:
    from trainer.config.schema import PipelineConfig

    close = difflib.get_close_matches(key, list(PipelineConfig.model_fields), n=1)
    hint = f"; if a setting was meant, did you mean {close[0]}?" if close else ""
    return ConfigIssue(key, f"{HELPER_NOTE} (${{…}}), so it is read as a helper variable of the file{hint}", "warning")


def helper_variables(issues: Sequence[ConfigIssue]) -> set[str]:
    """The top-level keys load_raw_with_issues reported as helper variables (validation leaves them out)."""
    return {i.path for i in issues if i.severity == "warning" and i.message.startswith(HELPER_NOTE)}


def _interpolations(node: Any) -> list[str]:
    """Every string that contains `${` (including escaped `\\${`)."""
    if isinstance(node, dict):
        return [text for value in node.values() for text in _interpolations(value)]
    if isinstance(node, list):
        return [text for value in node for text in _interpolations(value)]
    return [node] if isinstance(node, str) and "${" in node else []


_ENV_OPEN = re.compile(r"(?<!\\)\$\{oc\.env:")
_ENV_OPEN_ANY = re.compile(r"(?<!\\)\$\{")  # any unescaped interpolation
_ENV_CALL = re.compile(r"\$\{oc\.env:\s*([A-Za-z_]\w*)\s*(?:,([^${}]*))?\}")


def config_environment() -> dict[str, str]:
    """The variables `${oc.env:…}` may read in this (trainer) process: all of os.environ, or only the
    names matching POLICYLAB_CONFIG_ENV_ALLOW (comma-separated globs), which the platform sets for
    its runs so that a config cannot read the cluster's credentials into a run's logs."""
    allow = os.environ.get(ENV_ALLOW_VAR)
    if allow is None:
        return dict(os.environ)
    patterns = [p.strip() for p in allow.split(",") if p.strip()]
    return {k: v for k, v in os.environ.items()
            if any(fnmatch.fnmatchcase(k, p) for p in patterns) and not k.startswith(NEVER_READ_PREFIX)}


def apply_env(data: Any, env: Mapping[str, str] | None, path: str = "") -> tuple[Any, list[ConfigIssue]]:
    """Substitute every `${oc.env:NAME}` / `${oc.env:NAME,default}` from `env` (values escaped, so
    they are never interpolated themselves). With `env` None the text is kept as written (escaped
    for OmegaConf), to be substituted by the trainer on the cluster."""
    issues: list[ConfigIssue] = []
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            out[key], found = apply_env(value, env, f"{path}.{key}" if path else str(key))
            issues += found
        return out, issues
    if isinstance(data, list):
        items = [apply_env(value, env, f"{path}.{i}") for i, value in enumerate(data)]
        return [value for value, _ in items], [i for _, found in items for i in found]
    if not isinstance(data, str) or not _ENV_OPEN.search(data):
        return data, []
    pieces: list[str] = []
    position = 0
    for opening in _ENV_OPEN.finditer(data):
        if opening.start() < position:
            continue
        call = _ENV_CALL.match(data, opening.start())
        if call is None:
            issues.append(ConfigIssue(path, "write ${oc.env:NAME} or ${oc.env:NAME,default}: a literal variable "
                                            "name and a default without ${…}"))
            return data, issues
        pieces.append(data[position:call.start()])
        position = call.end()
        name, default = call.group(1), call.group(2)
        if env is None:
            pieces.append("\\" + call.group(0))
        elif name in env:
            pieces.append(env[name].replace("${", "\\${"))
        elif default is not None:
            if call.group(0) == data and default.strip() == "null":
                return None, issues
            pieces.append(default.strip())
        else:
            hint = f" (or not in {ENV_ALLOW_VAR})" if ENV_ALLOW_VAR in os.environ else ""
            issues.append(ConfigIssue(path, f"environment variable {name} is not set{hint} and has no default"))
    pieces.append(data[position:])
    return "".join(pieces), issues


def _resolve(data: dict[str, Any]) -> dict[str, Any]:
    """Resolve `${...}` with OmegaConf; configs without interpolation skip it (it is slow on big trees)."""
    if not _interpolations(data):
        return data
    try:
        node = OmegaConf.create(data)
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or ""
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fix = f"; the key that reads it goes with the override ~{key}" if key else ""  # OmegaConf reads lazily
        raise ConfigError([ConfigIssue(str(key), f"cannot resolve interpolation: {message}{fix}")]) from None
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
        raise ConfigError([ConfigIssue("", f"cannot resolve interpolation: {exc}")]) from None


def _parse_device_mappings(node: Any) -> None:
    """Replace every `device_mapping` expression string by its list; leave bad ones for validation."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "device_mapping" and isinstance(value, str):
                # a bad expression stays a string: the schema reports it with the field path
                with contextlib.suppress(DeviceMappingError):
                    node[key] = parse_device_mapping(value)
            else:
                _parse_device_mappings(value)
    elif isinstance(node, list):
        for item in node:
            _parse_device_mappings(item)


def _kept_top_level_keys() -> set[str]:
    """Keys a defaults layer may contribute as real content (native fields and foreign sections);
    any other key that only defaults layers define is a helper holder and is dropped."""
    from trainer.config.schema import PipelineConfig

    return set(PipelineConfig.model_fields) | FOREIGN_TOP_LEVEL_KEYS


def load_raw_with_issues(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """Like load_raw, but also returns warnings (skipped defaults entries). Raises ConfigError."""
    issues: list[ConfigIssue] = []
    raw, base_dir, _ = _read(source)
    merged, helper_keys = compose(raw, base_dir, issues)
    if isinstance(overrides, str):
        overrides = [overrides]
    override_errors: list[ConfigIssue] = []
    for override in overrides:
        try:
            apply_override(merged, str(override))
        except ConfigError as exc:
            override_errors.extend(exc.issues)
    if override_errors or any(i.severity == "error" for i in issues):
        raise ConfigError(issues + override_errors)
    # Built-in presets sit underneath everything, for `${deepspeed_zero2}` without defaults files.
    referenced = " ".join(_interpolations(merged))
    for name, preset in DEEPSPEED_PRESETS.items():
        if name not in merged and name in referenced:
            merged[name] = copy.deepcopy(preset)
            helper_keys.add(name)
    missing = missing_values(merged)
    if missing:  # before resolution: an interpolation of a `???` would name the key that reads it instead
        raise ConfigError(issues + missing)
    merged = rewrite_hydra_resolvers(merged)
    helper_keys |= referenced_top_level_keys(merged)
    derived = derived_helper_keys(merged) - helper_keys - _kept_top_level_keys()
    issues += [_helper_warning(key) for key in sorted(derived)]  # kept here; validation leaves them out
    issues += plain_secret_issues(merged)  # before ${oc.env:…} puts a value in
    merged, env_issues = apply_env(merged, env)
    env_issues += bounds.check_resolvers(merged)
    if env_issues:
        raise ConfigError(issues + env_issues)
    bounds.check_resolved_size(merged)
    try:
        resolved = _resolve(merged)
    except ConfigError as exc:  # an interpolation of a skipped defaults file's key: name that file too
        raise ConfigError(issues + exc.issues) from None
    for key in helper_keys - _kept_top_level_keys():
        resolved.pop(key, None)
    misplaced = misplaced_reference_issues(resolved)
    if misplaced:
        raise ConfigError(issues + misplaced)
    _parse_device_mappings(resolved)
    return resolved, issues


def load_raw(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """YAML file (a Path), YAML text or a mapping -> plain resolved dict (see the module docstring)."""
    return load_raw_with_issues(source, overrides, env=env)[0]
