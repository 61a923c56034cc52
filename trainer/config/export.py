"""Everything derived from the schema for the outside: JSON Schema, native YAML, the Markdown reference."""

from __future__ import annotations

import copy
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trainer.config.bounds import INT64_MAX
from trainer.config.confinement import SYSTEM_ENVS_ALLOWED
from trainer.config.introspect import sections
from trainer.config.schema import STEP_MAX, STRATEGY_CONFIG_MODELS, PipelineConfig, field_status

MARKDOWN_COMMAND = "python -m trainer schema --markdown > docs/config.md"


def config_json_schema() -> dict[str, Any]:
    """JSON Schema of the native config; every property carries a description and a category."""
    return copy.deepcopy(_json_schema())


@functools.cache
def _json_schema() -> dict[str, Any]:
    return PipelineConfig.model_json_schema()


class _NativeDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # `${` would be read back as interpolation: escape it so text survives a round trip. A kept
    # `${oc.env:…}` (the web side never resolves it) stays live for the trainer to substitute.
    text = value.replace("${", "\\${").replace("\\${oc.env:", "${oc.env:")
    return dumper.represent_scalar("tag:yaml.org,2002:str", text)


_NativeDumper.add_representer(str, _str_presenter)


def config_to_yaml(config: PipelineConfig | Mapping[str, Any]) -> str:
    """Native YAML that load_config reads back into an equal PipelineConfig."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else dict(config)
    return yaml.dump(data, Dumper=_NativeDumper, sort_keys=False, allow_unicode=True, width=120)


# ---------------------------------------------------------------------------------------------
# Markdown reference


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        text = " \\| ".join(names)
        return f"{text} \\| null" if type(None) in args else text
    if origin in (list, tuple):
        return f"list[{_type_name(args[0])}]" if args else "list"
    if origin is dict:
        return f"mapping of {_type_name(args[1])}" if args else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation.__name__.startswith("StrategyArgs_"):
            return "strategy"
        return "section"
    if annotation is typing.Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(section)"
        return f"`{value!r}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{info.default!r}`"


def _status(model: type[BaseModel], name: str) -> str:
    status, reason = field_status(model, name)
    reason = reason.replace("|", "\\|")
    return {"acts": "acts", "import_only": f"no effect: {reason}", "planned": f"not built: {reason}"}[status]


def config_markdown() -> str:
    lines = [
        "# Config reference",
        "",
        f"Generated from `trainer/config/schema.py` by `{MARKDOWN_COMMAND}`; do not edit by hand.",
        "",
        "The native format is ROLL's layout: pipeline keys at the top level and one section per worker role",
        "(`actor_train`, `actor_infer`, `reference`, `critic`, `rewards.<name>`, `validation`). Every worker",
        "section has the same keys (`model_args`, `training_args`, `data_args`, `generating_args`,",
        "`strategy_args`, `device_mapping`, …). `strategy_args.strategy_config` is typed by",
        "`strategy_args.strategy_name`; its tables are listed per strategy below.",
        "",
        "Loading (`trainer.config.load_raw`), in this order:",
        "",
        "- `defaults:` entries name YAML files relative to the config (`../config/deepspeed_zero2@_here_`);",
        "  `deepspeed_zero`, `deepspeed_zero2`, `deepspeed_zero3` and `deepspeed_zero3_cpuoffload` are built in,",
        "  so `strategy_config: ${deepspeed_zero2}` works without the files. A `hydra:` section is ignored.",
        "- overrides from the command line: `a.b=c`, `+a.b=c`, `++a.b=c`, `~a.b` (values are YAML: `[0,1]`, `1e-6`).",
        "- `${...}` interpolation: `${response_length}`, `${add:…}`, `${subtract:a,b}`, `${multiply:…}`,",
        "  `${int_div:a,b}`, `${divide:a,b}`, `${not:x}` (other resolvers are refused). `${oc.env:NAME}` and",
        "  `${oc.env:NAME,default}` are substituted by the trainer only; the platform keeps them as written,",
        "  and its runs may read only the variables named by `POLICYLAB_CONFIG_ENV_ALLOW`. `${secret:NAME}` names a",
        "  team secret (credentials such as `judge_api_key`): it stays as written in every copy of the config and",
        "  the trainer resolves it where the field is used (docs/decisions/0045-team-secrets.md).",
        "- limits (`trainer/config/bounds.py`): 1,000,000 characters, 64 levels of nesting, 20,000 values after",
        "  YAML aliases, 1,000 aliases, 4,000,000 characters once interpolation is resolved.",
        f"- integers: within ±{INT64_MAX:,} (what the platform stores); `max_steps` at most {STEP_MAX:,}.",
        "- on the platform, fields marked *path* (read or write) and the folders `tracker_kwargs` name are",
        "  confined: reads under `POLICYLAB_READ_ROOTS` or the run's own directory, writes inside the run",
        "  directory; URLs (`file:`, `s3://`, `http://`, …) only under a prefix in `POLICYLAB_URL_PREFIXES`;",
        "  `tiny://<size>` only in model fields, with a plain size name (`trainer/config/confinement.py`).",
        "- `judge_api_url` and `code_url` (everywhere, the CLI included): http(s) URLs without a query string,",
        "  fragment or `user@`, whose host resolves only to public addresses, unless the deployment lists the host",
        "  or a URL prefix in `POLICYLAB_OUTBOUND_ALLOW` (e.g. `http://127.0.0.1:9000/v1` for a judge on this",
        "  machine); the platform's own service ports stay refused. Each request checks again and connects to",
        "  the address it checked (`trainer/config/outbound.py`, docs/decisions/0047).",
        "- on the platform, `system_envs` may set only these variables (a family never includes a name that",
        "  points at a file, folder, address or plugin, such as `NCCL_DEBUG_FILE`); a deployment adds names or",
        "  globs with `POLICYLAB_SYSTEM_ENVS_ALLOW`:",
        "  " + ", ".join(f"`{name}`" for name in SYSTEM_ENVS_ALLOWED) + ".",
        "- `device_mapping` may be written as `[0,1,2]`, `range(0,8)`, `list(range(0,16))` or a `+` of these;",
        "  the expression is parsed, never executed.",
        "",
        "Status: *acts* — the engine reads the field; *no effect* — accepted so that an imported or ROLL config",
        "loses nothing, but this build does not act on it; *not built* — reserved for a backend or feature that",
        "does not exist yet. Validation warns about every field set to a non-default value that does not act,",
        "and refuses a `strategy_name` this build does not have.",
        "",
        "`python -m trainer validate CONFIG [overrides…] [--show]` reports every problem at once (batch",
        "arithmetic, parallel sizes, device ranges, lengths, exclusive options, unknown keys with the closest",
        "valid name) and prints the derived batch sizes.",
        "",
    ]
    by_strategy: dict[type[BaseModel], list[str]] = {}
    for name, model in STRATEGY_CONFIG_MODELS.items():
        by_strategy.setdefault(model, []).append(name)
    for path, model in sections():
        if model in by_strategy:
            names = ", ".join(f"`{n}`" for n in by_strategy[model])
            title = f"strategy_config for {names}"
        elif model is PipelineConfig:
            title = "Top level"
        elif path == "<worker>":
            title = "Worker sections: `actor_train`, `actor_infer`, `reference`, `critic`, `validation`"
        else:
            title = f"`{path}`"
        lines += [f"## {title}", ""]
        doc = (model.__doc__ or "").strip()
        if doc and "BaseModel" not in doc and not doc.startswith("Base of"):
            lines += [doc.splitlines()[0], ""]
        if not model.model_fields:
            lines += ["(no settings)", ""]
            continue
        lines += ["| key | type | default | category | status | description |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for name, info in model.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            description = (info.description or "").replace("|", "\\|")
            lines.append(
                f"| `{name}` | {_type_name(info.annotation)} | {_default(info)} | {extra.get('category', '')} "
                f"| {_status(model, name)} | {description} |"
            )
        lines.append("")
    return "\n".join(lines)
