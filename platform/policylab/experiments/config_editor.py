"""The config editor's form, generated from trainer.config's JSON Schema (no field list here).

`build_form(values, issues)` walks `config_json_schema()` and returns a tree of sections for the
templates: the fields of each level grouped by their `category`, nested model sections (worker
roles, their model/training/data/generation args, each `rewards` entry) as collapsible
sub-sections. `parse_form(post)` walks the same schema to turn submitted inputs back into a config
dict, typed by the schema. Input names are the dotted config paths that ConfigIssue.path uses,
which is how an error lands next to its input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import yaml
from django.conf import settings

from policylab.experiments.services import PREFLIGHT_WHERE, launch_preflight, validate_on_platform
from trainer.config import (
    ConfigError,
    ConfigIssue,
    PipelineConfig,
    config_json_schema,
    config_to_yaml,
    load_raw,
)
from trainer.config.bounds import check_tree, check_yaml_text
from trainer.config.memory_fit import GIB, ModelShape, estimate_memory, model_shapes, read_model_config
from trainer.config.topology import TRAINING_ROLES

INCLUDE_PREFIX = "__include__."  # checkbox that keeps an optional section in the config
DEFAULT_DEVICE_GIB = 80.0  # the memory estimate's device until the user picks another
MISSING = object()
_EVENT_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # only streams events: no recursion


def dump_yaml(value: Any, **options: Any) -> str | None:
    """`value` as YAML text, or None when it is too deep or too large to show: yaml.safe_dump
    recurses once per level (900 nested lists raised RecursionError, a 500). Values that pass
    validation are always within these bounds; this guards the raw values shown after a failure."""
    try:
        check_tree(value, "value")
    except ConfigError:
        return None
    return yaml.safe_dump(value, **options)


def load_field_yaml(text: str) -> Any:
    """A form input's YAML, held to the same limits as a whole config before it is composed
    (PyYAML's composer recurses once per level; libyaml's segfaults on deep nesting)."""
    check_yaml_text(text, "value", _EVENT_LOADER)
    return yaml.safe_load(text)


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return config_json_schema()


def resolve(node: Mapping[str, Any]) -> dict[str, Any]:
    """Follow a local $ref, keeping sibling keys (description, category, default) of the referrer."""
    if "$ref" not in node:
        return dict(node)
    name = node["$ref"].rsplit("/", 1)[-1]
    target = dict(schema().get("$defs", {}).get(name, {}))
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def split_nullable(node: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the non-null alternative, whether null is allowed) for `X | None` unions."""
    node = resolve(node)
    options = node.get("anyOf") or node.get("oneOf")
    if not options:
        return node, node.get("type") == "null"
    non_null = [o for o in options if o.get("type") != "null"]
    nullable = len(non_null) < len(options)
    if len(non_null) == 1:
        siblings = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        return {**resolve(non_null[0]), **siblings}, nullable
    return node, nullable


def is_model(node: Mapping[str, Any]) -> bool:
    return "properties" in node


def model_map_item(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The value schema of a `dict[str, Model]` field (e.g. rewards), else None."""
    extra = node.get("additionalProperties")
    if node.get("type") == "object" and isinstance(extra, Mapping):
        item = resolve(extra)
        if is_model(item):
            return item
    return None


@dataclass
class FormField:
    path: str
    name: str
    kind: str  # text | integer | number | checkbox | select | yaml
    value: Any
    description: str = ""
    default: Any = None
    choices: list[tuple[str, str]] = field(default_factory=list)
    nullable: bool = False
    errors: list[str] = field(default_factory=list)
    status: str = "acts"  # or import_only / planned: the engine does not act on it (schema.Inactive)
    status_reason: str = ""
    common: bool = False  # one of the knobs the basic view shows (fld(..., common=True))

    @property
    def status_label(self) -> str:
        return {"import_only": "no effect here", "planned": "not built yet"}.get(self.status, "")

    @property
    def input_value(self) -> str:
        """The value as the input's text."""
        if self.value is None:
            return ""
        if self.kind == "yaml":
            text = dump_yaml(self.value, default_flow_style=True, width=10_000) or ""
            return text.removesuffix("...\n").strip()  # a bare scalar gets an end-of-document marker
        if self.kind == "select":
            return json.dumps(self.value)
        return str(self.value)

    @property
    def default_text(self) -> str:
        return "unset" if self.default is None else json.dumps(self.default)


@dataclass
class FieldGroup:
    category: str
    fields: list[FormField]

    @property
    def has_common(self) -> bool:
        return any(f.common for f in self.fields)


@dataclass
class FormSection:
    path: str
    title: str
    description: str = ""
    optional: bool = False  # may be absent (None): rendered with an "include" checkbox
    included: bool = True
    groups: list[FieldGroup] = field(default_factory=list)
    sections: list[FormSection] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def include_name(self) -> str:
        return INCLUDE_PREFIX + self.path

    @property
    def error_count(self) -> int:
        nested = sum(s.error_count for s in self.sections)
        return len(self.errors) + sum(len(f.errors) for g in self.groups for f in g.fields) + nested

    @property
    def has_common(self) -> bool:
        """Whether the basic view shows anything of this section (a common field in it or below)."""
        return any(g.has_common for g in self.groups) or any(s.has_common for s in self.sections)


def field_kind(node: Mapping[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    """The input kind of a (non-null) leaf schema, and its choices for selects."""
    if "enum" in node:
        return "select", [(json.dumps(v), str(v)) for v in node["enum"]]
    if "const" in node:
        return "select", [(json.dumps(node["const"]), str(node["const"]))]
    kind = {"string": "text", "integer": "integer", "number": "number", "boolean": "checkbox"}.get(node.get("type", ""))
    return kind or "yaml", []


def leaf_kind(node: Mapping[str, Any], nullable: bool) -> tuple[str, list[tuple[str, str]]]:
    """Like field_kind, but a `bool | None` is a select: a checkbox cannot say "unset"."""
    kind, choices = field_kind(node)
    if kind == "checkbox" and nullable:
        return "select", [("true", "true"), ("false", "false")]
    return kind, choices


def path_join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


# Roles whose generating_args act (the schema's own words: "Sampling settings (actor_infer and validation)").
GENERATING_ROLES = ("actor_infer", "validation")


def in_basic_view(path: str) -> bool:
    """Whether a field the schema marks `common` is shown by the basic view at `path`: its role sections share
    one schema, so a training knob shows only under a training role, a sampling knob only under a generating
    one, and reward workers (rule rewards mostly) only in the full form."""
    role, *rest = path.split(".")
    if role == "rewards":
        return False
    if "training_args" in rest and role not in TRAINING_ROLES:
        return False
    return not ("generating_args" in rest and role not in GENERATING_ROLES)


def build_section(
    node: Mapping[str, Any], path: str, title: str, values: Any, issues: Mapping[str, list[str]]
) -> FormSection:
    node, optional = split_nullable(node)
    section = FormSection(
        path=path,
        title=title,
        description=node.get("description", ""),
        optional=optional,
        included=values is not None if optional else True,
        errors=list(issues.get(path, [])) if path else [],
    )
    values = values if isinstance(values, Mapping) else {}
    groups: dict[str, list[FormField]] = {}
    for name, raw in node.get("properties", {}).items():
        child_path = path_join(path, name)
        value = values.get(name, MISSING)
        prop, nullable = split_nullable(raw)
        category = raw.get("category") or prop.get("category") or "General"
        if is_model(prop):
            default = raw.get("default", MISSING)
            section_values = value if value is not MISSING else (None if nullable and default is None else {})
            section.sections.append(build_section(raw, child_path, name, section_values, issues))
            continue
        item = model_map_item(prop)
        if item is not None:
            entries = value if isinstance(value, Mapping) else {}
            mapping = FormSection(path=child_path, title=name, description=prop.get("description", ""),
                                  errors=list(issues.get(child_path, [])))
            mapping.sections = [
                build_section(item, path_join(child_path, key), key, entry, issues) for key, entry in entries.items()
            ]
            section.sections.append(mapping)
            continue
        kind, choices = leaf_kind(prop, nullable)
        default = raw.get("default", prop.get("default"))
        if kind == "select" and nullable:
            choices = [("null", "(unset)"), *choices]
        groups.setdefault(category, []).append(
            FormField(
                path=child_path,
                name=name,
                kind=kind,
                value=default if value is MISSING else value,
                description=raw.get("description", prop.get("description", "")),
                default=default,
                choices=choices,
                nullable=nullable,
                errors=list(issues.get(child_path, [])),
                status=raw.get("status", "acts"),
                status_reason=raw.get("status_reason", ""),
                common=bool(raw.get("common")) and in_basic_view(child_path),
            )
        )
    section.groups = [FieldGroup(category, fields) for category, fields in groups.items()]
    return section


def issues_by_path(issues: Sequence[ConfigIssue], known_paths: set[str]) -> dict[str, list[str]]:
    """Attach each issue to its input, or to the closest enclosing section or input that exists
    (an unknown key `a.b.lr` lands on section `a.b`)."""
    out: dict[str, list[str]] = {}
    for issue in issues:
        path = issue.path
        while path and path not in known_paths:
            path = path.rpartition(".")[0]
        out.setdefault(path, []).append(issue.message if path == issue.path else f"{issue.path}: {issue.message}")
    return out


def all_paths(section: FormSection) -> set[str]:
    paths = {section.path}
    for group in section.groups:
        paths.update(f.path for f in group.fields)
    for sub in section.sections:
        paths |= all_paths(sub)
    return paths


def build_form(values: Mapping[str, Any] | None, issues: Sequence[ConfigIssue] = ()) -> FormSection:
    """The whole editor form for `values` (a native config dict), with `issues` attached inline."""
    root = schema()
    skeleton = build_section(root, "", "config", values or {}, {})
    if not issues:
        return skeleton
    return build_section(root, "", "config", values or {}, issues_by_path(issues, all_paths(skeleton)))


class FormParseError(Exception):
    """Some inputs are not of their field's type; `partial` is the config without those fields."""

    def __init__(self, issues: list[ConfigIssue], partial: dict[str, Any]):
        self.issues = issues
        self.partial = partial
        super().__init__("; ".join(str(i) for i in issues))


def parse_value(kind: str, text: str, nullable: bool, path: str) -> Any:
    text = text.strip()
    if text == "" and kind not in ("text", "checkbox"):
        if nullable:
            return None
        raise ValueError("a value is required")
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text)
    if kind == "select":
        return json.loads(text)
    if kind == "yaml":
        return load_field_yaml(text)
    if kind == "text" and text == "" and nullable:
        return None
    return text


KIND_WORDS = {"integer": "a whole number", "number": "a number", "select": "one of the listed choices",
              "yaml": "a YAML value such as [0, 1] or {key: value}"}


def parse_section(node: Mapping[str, Any], path: str, post: Mapping[str, Any], problems: list[ConfigIssue]) -> Any:
    node, optional = split_nullable(node)
    if optional and path and not post.get(INCLUDE_PREFIX + path):
        return None
    out: dict[str, Any] = {}
    for name, raw in node.get("properties", {}).items():
        child_path = path_join(path, name)
        prop, nullable = split_nullable(raw)
        if is_model(prop):
            value = parse_section(raw, child_path, post, problems)
            if value is not None or nullable:
                out[name] = value
            continue
        item = model_map_item(prop)
        if item is not None:
            keys = sorted({k[len(child_path) + 1:].split(".", 1)[0] for k in post if k.startswith(child_path + ".")}
                          | {k[len(INCLUDE_PREFIX) + len(child_path) + 1:].split(".", 1)[0]
                             for k in post if k.startswith(INCLUDE_PREFIX + child_path + ".")})
            out[name] = {key: parse_section(item, path_join(child_path, key), post, problems) for key in keys}
            continue
        kind, _ = leaf_kind(prop, nullable)
        default = raw.get("default", prop.get("default", MISSING))
        if kind == "checkbox":
            if not same_value(bool(post.get(child_path)), default):
                out[name] = bool(post.get(child_path))
            continue
        if child_path not in post or (kind == "yaml" and not str(post[child_path]).strip() and not nullable):
            continue  # not in the form, or a blank collection/union: the schema default applies
        try:
            value = parse_value(kind, str(post[child_path]), nullable, child_path)
            if not same_value(value, default):
                out[name] = value
        except ConfigError as exc:  # past a size, depth or alias limit
            problems += [ConfigIssue(path=child_path, message=i.message) for i in exc.issues]
        except (ValueError, yaml.YAMLError) as exc:
            detail = "a value is required" if str(exc) == "a value is required" else f"expected {KIND_WORDS.get(kind, kind)}"
            problems.append(ConfigIssue(path=child_path, message=f"{detail}, got {post[child_path]!r}"))
    return out


def same_value(value: Any, default: Any) -> bool:
    """Whether a submitted value is the schema's default (1 and 1.0 are; True and 1 are not)."""
    if default is MISSING:
        return False
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    return value == default


def parse_form(post: Mapping[str, Any]) -> dict[str, Any]:
    """Submitted inputs -> a config dict, typed by the schema. Raises FormParseError naming the fields
    whose text is not of their type (e.g. letters in a number).

    The form shows every field, defaults included; a field whose value is its schema default is left out
    of the dict, as a YAML file leaves out what it does not set. Validation then sees as set
    (pydantic's model_fields_set) the fields the user gave a value of their own, and warns about those
    only, as `python -m trainer validate` does for a file (docs/decisions/0026-checkpoint-verdicts-and-editor-checks.md)."""
    problems: list[ConfigIssue] = []
    config = parse_section(schema(), "", post, problems)
    if problems:
        raise FormParseError(problems, config)
    return config


def raw_values(source: str | Mapping[str, Any]) -> dict[str, Any]:
    """The config as the user wrote it (for redisplay when it does not validate)."""
    try:
        return load_raw(source)
    except Exception:  # unreadable YAML: the editor shows the errors and an empty form
        return dict(source) if isinstance(source, Mapping) else {}


def validation_payload(
    source: str | Mapping[str, Any], overrides: Sequence[str] = (), source_format: str = "auto",
    *, memory: Mapping[str, Any] | None = None, preflight: bool = False,
) -> dict[str, Any]:
    """Everything the editor and POST /api/configs/validate/ show about a config; with `memory` (the editor's
    inputs), its memory-fit estimate too, when the config is coherent; with `preflight`, the launch's machine
    check (services.launch_preflight) as warnings under `preflight`."""
    result = validate_on_platform(source, overrides, source_format)
    machine = launch_preflight(result) if preflight else None
    if result.config is not None:
        config = result.config.model_dump(mode="json")
        text = config_to_yaml(result.config)
    else:
        config = None
        text = source if isinstance(source, str) else dump_yaml(dict(source), sort_keys=False) or ""
    return {
        "ok": result.ok,
        "errors": [{"field": i.path, "message": i.message} for i in result.errors],
        "warnings": [{"field": i.path, "message": i.message} for i in result.warnings],
        "derived": result.derived,
        "source_format": result.source_format,
        "config": config,
        "yaml": text,
    } | ({"memory": memory_payload(result.config, memory)} if memory is not None and result.config is not None else {}) \
      | ({"preflight": [{"field": i.path, "message": i.message} for i in machine], "preflight_where": PREFLIGHT_WHERE}
         if machine is not None else {})


MEMORY_SHAPE_FIELDS = ("params", "layers", "hidden", "kv_heads", "head_dim", "vocab")


def declared_shape(post: Mapping[str, Any]) -> ModelShape | None:
    """The model size the editor's user typed in (`memory_params` in billions, the rest whole numbers), used
    for models whose config.json the platform cannot read (hub ids); None unless every field is given."""
    try:
        values = {name: float(str(post.get(f"memory_{name}", "")).strip()) for name in MEMORY_SHAPE_FIELDS}
    except ValueError:
        return None
    if any(not math.isfinite(v) or v <= 0 for v in values.values()):
        return None
    counts = {name: int(values[name]) for name in MEMORY_SHAPE_FIELDS[1:]}
    return ModelShape(params=int(values["params"] * 1e9), **counts)


def memory_payload(config: PipelineConfig, post: Mapping[str, Any]) -> dict[str, Any]:
    """The editor's memory-fit estimate of `config` per role, on devices of `memory_device_gib` GiB (default 80).
    Model sizes come from tiny models, from config.json under the deployment's read roots, or from the size
    the user declared (trainer.config.memory_fit; docs/decisions/0021)."""
    try:
        gib = float(post.get("memory_device_gib") or DEFAULT_DEVICE_GIB)
    except ValueError:
        gib = DEFAULT_DEVICE_GIB
    gib = min(max(gib, 1.0), 4096.0) if math.isfinite(gib) else DEFAULT_DEVICE_GIB
    shapes = model_shapes(config, lambda path: read_model_config(path, settings.POLICYLAB_READ_ROOTS),
                          declared_shape(post))
    estimate = estimate_memory(config, shapes, int(gib * GIB)).to_dict()
    estimate["models"] = {path: shape.source if shape else "unknown" for path, shape in shapes.items()}
    return estimate
