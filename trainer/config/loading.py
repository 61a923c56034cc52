"""Turn a YAML file, YAML text or mapping (plus command-line overrides) into a plain resolved dict.

A `str` is always YAML text and a `Path` is a file: only the trainer's command line passes a Path
(the web side never names a file). Every input is bounded before it is parsed (trainer.config.bounds).

Order of operations, as in Hydra/ROLL:
1. parse YAML (OmegaConf's loader, so `1e-6` is a float);
2. merge `defaults:` entries (YAML files next to a config file; `deepspeed_zero*` fall back to
   built-in presets), then the file itself (`_self_` last unless listed);
3. apply overrides `a.b=c`, `+a.b=c`, `++a.b=c`, `~a.b` (values parsed as YAML);
4. `${oc.env:VAR,default}`: substituted from `env` in the trainer; kept as written when `env` is None
   (the web server never reads its own environment into a config);
5. resolve the other `${...}` interpolation (`${response_length}`, `${subtract:a,b}` …);
6. drop helper keys that only the `defaults:` layers defined (preset holders), and `hydra:`;
7. parse `device_mapping` expressions with the allow-list parser (never evaluated).
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel

from trainer.config import bounds
from trainer.config.device_mapping import DeviceMappingError, parse_device_mapping
from trainer.config.issues import ConfigError, ConfigIssue
from trainer.config.presets import DEEPSPEED_PRESETS

MAX_DEFAULTS_DEPTH = 8
# Top-level sections of verl / SkyRL / RLinf files (their defaults files may hold them).
FOREIGN_TOP_LEVEL_KEYS = frozenset(
    {"data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function", "algorithm", "trainer",
     "generator", "placement", "environment", "cluster", "runner", "rollout", "actor", "reward", "ray_init"}
)
_KEY_RE = re.compile(r"^[A-Za-z_][\w\-]*(\.[\w\-]+)*$")
ENV_ALLOW_VAR = "POLICYLAB_CONFIG_ENV_ALLOW"
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


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _expand_defaults(
    raw: dict[str, Any], base_dir: Path | None, issues: list[ConfigIssue], depth: int = 0
) -> tuple[dict[str, Any], set[str]]:
    """Merge the `defaults:` list of `raw` into it. Returns the merged dict and the top-level keys
    that only defaults layers provided (helper holders such as `deepspeed_zero2`)."""
    defaults = raw.pop("defaults", None)
    raw.pop("hydra", None)
    if defaults is None:
        return raw, set()
    if not isinstance(defaults, list):
        issues.append(ConfigIssue("defaults", "must be a list of file names (e.g. ../config/deepspeed_zero2@_here_)"))
        return raw, set()
    merged: dict[str, Any] = {}
    self_merged = False
    for index, entry in enumerate(defaults):
        where = f"defaults.{index}"
        if entry == "_self_":
            merged = _deep_merge(merged, raw)
            self_merged = True
            continue
        if not isinstance(entry, str):
            issues.append(ConfigIssue(where, f"entry {entry!r} skipped: only file entries are supported", "warning"))
            continue
        name, _, package = entry.partition("@")
        layer = _load_default(name, base_dir, where, issues, depth)
        if layer is None:
            continue
        if package and package != "_here_":
            for part in reversed(package.split(".")):
                layer = {part: layer}
        merged = _deep_merge(merged, layer)
    if not self_merged:
        merged = _deep_merge(merged, raw)
    helper_keys = set(merged) - set(raw)
    return merged, helper_keys


def _load_default(
    name: str, base_dir: Path | None, where: str, issues: list[ConfigIssue], depth: int
) -> dict[str, Any] | None:
    if depth >= MAX_DEFAULTS_DEPTH:
        issues.append(ConfigIssue(where, f"defaults nested deeper than {MAX_DEFAULTS_DEPTH} levels"))
        return None
    candidates = []
    if base_dir is not None:
        candidates = [base_dir / name, base_dir / f"{name}.yaml", base_dir / f"{name}.yml"]
    for path in candidates:
        if path.is_file():
            try:
                layer = _parse_yaml(path.read_text(encoding="utf-8"), str(path))
            except ConfigError as exc:
                issues.extend(ConfigIssue(where, i.message) for i in exc.issues)
                return None
            except (OSError, UnicodeDecodeError) as exc:
                issues.append(ConfigIssue(where, f"cannot read {path}: {exc}"))
                return None
            layer, _ = _expand_defaults(layer, path.parent, issues, depth + 1)
            return layer
    preset = Path(name).name
    if preset in DEEPSPEED_PRESETS:
        return {preset: copy.deepcopy(DEEPSPEED_PRESETS[preset])}
    issues.append(
        ConfigIssue(where, f"defaults entry {name!r} not found next to the config; skipped", "warning")
    )
    return None


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
        node = node[part]
        if not isinstance(node, dict):
            prefix = ".".join(parts[: i + 1])
            raise ConfigError([ConfigIssue(prefix, f"override {override!r}: {prefix} is a value, not a section")])
    return node, parts[-1]


# ---------------------------------------------------------------------------------------------
# resolution


def _interpolations(node: Any) -> list[str]:
    """Every string that contains `${` (including escaped `\\${`)."""
    if isinstance(node, dict):
        return [text for value in node.values() for text in _interpolations(value)]
    if isinstance(node, list):
        return [text for value in node for text in _interpolations(value)]
    return [node] if isinstance(node, str) and "${" in node else []


_ENV_OPEN = re.compile(r"(?<!\\)\$\{oc\.env:")
_ENV_CALL = re.compile(r"\$\{oc\.env:\s*([A-Za-z_]\w*)\s*(?:,([^${}]*))?\}")


def config_environment() -> dict[str, str]:
    """The variables `${oc.env:…}` may read in this (trainer) process: all of os.environ, or only the
    names matching POLICYLAB_CONFIG_ENV_ALLOW (comma-separated globs), which the platform sets for
    its runs so that a config cannot read the cluster's credentials into a run's logs."""
    allow = os.environ.get(ENV_ALLOW_VAR)
    if allow is None:
        return dict(os.environ)
    patterns = [p.strip() for p in allow.split(",") if p.strip()]
    return {k: v for k, v in os.environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


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
        raise ConfigError([ConfigIssue(str(key), f"cannot resolve interpolation: {message}")]) from None
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
    merged, helper_keys = _expand_defaults(raw, base_dir, issues)
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
    merged, env_issues = apply_env(merged, env)
    env_issues += bounds.check_resolvers(merged)
    if env_issues:
        raise ConfigError(issues + env_issues)
    bounds.check_resolved_size(merged)
    resolved = _resolve(merged)
    for key in helper_keys - _kept_top_level_keys():
        resolved.pop(key, None)
    _parse_device_mappings(resolved)
    return resolved, issues


def load_raw(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """YAML file (a Path), YAML text or a mapping -> plain resolved dict (see the module docstring)."""
    return load_raw_with_issues(source, overrides, env=env)[0]
