"""Validate a config: schema errors and cross-field rules, ALL at once, as ConfigIssues.

validate_config never raises for bad input: load errors, schema errors (with dotted paths and the
closest valid key name) and the cross-field rules all become ConfigIssues.

This module orchestrates: parse (load, import, build the pydantic model, translate its errors) -> checks (the
rules of each knob family, in trainer/config/checks/) -> derive. Decision 0052.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from trainer.config import roll_keys
from trainer.config.bounds import check_integers
from trainer.config.checks.agentic import check_agentic, check_step_estimators
from trainer.config.checks.availability import check_availability
from trainer.config.checks.cluster import (
    check_batch_arithmetic,
    check_devices,
    check_micro_batching,
    check_parallel_sizes,
)
from trainer.config.checks.common import warning
from trainer.config.checks.data import check_data, check_domains, check_lengths
from trainer.config.checks.hygiene import check_inactive_fields, check_suspicious
from trainer.config.checks.loss import check_algorithm, check_train_infer_correction
from trainer.config.checks.models import check_adapters, check_freezing, check_lora
from trainer.config.checks.rewards import check_dynamic_sampling, check_rewards
from trainer.config.checks.rollout import check_async_rollout
from trainer.config.checks.run import check_checkpointing, check_profiling
from trainer.config.checks.strategies import (
    check_deepspeed_forward_only,
    check_deepspeed_owned_keys,
    check_strategies,
)
from trainer.config.confinement import tiny_issues
from trainer.config.importers import detect_and_translate_traced, rules_of
from trainer.config.importers.engines import name_the_override
from trainer.config.introspect import key_locations, models_in
from trainer.config.issues import ConfigError, ConfigIssue, ValidationResult
from trainer.config.loading import helper_variables, load_raw_with_issues
from trainer.config.schema import STRATEGY_ARGS_MODELS, PipelineConfig
from trainer.config.topology import (
    TRAINING_ROLES,
    devices_per_worker,
    num_nodes,
    roles,
    samples_per_rollout,
    strategy_name,
    train_shape,
    world_size,
)

Source = str | Path | Mapping[str, Any]
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}


# ---------------------------------------------------------------------------------------------
# entry points


def validate_config(
    source: Source, overrides: Sequence[str] = (), source_format: str = "auto", *, env: Mapping[str, str] | None = None
) -> ValidationResult:
    """Load, translate, validate and derive. Never raises for bad input.

    `env` is what `${oc.env:…}` reads (the trainer passes loading.config_environment()); None keeps
    those references as written, as the web side must."""
    result = ValidationResult()
    try:
        _validate_into(result, source, overrides, source_format, env)
    except ConfigError as exc:
        _add(result, exc.issues)
    except Exception as exc:  # a bug must still not surface as a traceback to the user
        result.errors.append(ConfigIssue("", f"internal error while validating ({type(exc).__name__}: {exc})"))
        result.config = None
    return result


def load_config(
    source: Source, overrides: Sequence[str] = (), source_format: str = "auto", *, env: Mapping[str, str] | None = None
) -> PipelineConfig:
    """Return the validated PipelineConfig or raise ConfigError with every problem found."""
    result = validate_config(source, overrides, source_format, env=env)
    if not result.ok or result.config is None:
        raise ConfigError(result.errors + result.warnings)
    return result.config


def _add(result: ValidationResult, issues: list[ConfigIssue]) -> None:
    for issue in issues:
        (result.errors if issue.severity == "error" else result.warnings).append(issue)


def _validate_into(
    result: ValidationResult, source: Source, overrides: Sequence[str], source_format: str,
    env: Mapping[str, str] | None,
) -> None:
    raw, load_issues = load_raw_with_issues(source, overrides, env=env)
    _add(result, load_issues)
    raw = {key: value for key, value in raw.items() if key not in helper_variables(load_issues)}
    native, fmt, import_issues, origin = detect_and_translate_traced(raw, source_format)
    result.source_format = fmt
    _add(result, import_issues)
    if result.errors:
        _add(result, _errors_behind(result.errors, source, overrides, source_format, env))
        return
    config, schema_issues = build_config(native)
    if fmt == "roll":
        native, config, schema_issues, ignored = _drop_what_roll_ignores(native, config, schema_issues)
        _add(result, ignored)
    _add(result, schema_issues)
    _add(result, _outside(check_integers(native), schema_issues))
    if config is None or result.errors:
        # Every error at once: the rules and engines are checked on the config without the refused values.
        _add(result, _outside(_behind_schema_errors(native, result.errors, fmt, origin), result.errors))
        if fmt == "roll":
            result.errors = [_with_removal_override(i, raw) for i in result.errors]
        return
    _add(result, in_source_terms(check_rules(config), fmt, origin))
    chosen = {f"{role}.strategy_args.strategy_name": strategy_name(role.split(".")[0], worker)
              for role, worker in roles(config).items()}
    if result.errors:  # the engines' errors too, in the same pass
        _add(result, [i for i in name_the_override(fmt, check_availability(config), origin, chosen)
                      if i.severity == "error"])
        if fmt == "roll":
            result.errors = [_with_removal_override(i, raw) if i.kind == "not_built" else i for i in result.errors]
        return
    # A coherent config is kept (and its numbers derived) even when this build lacks a backend it
    # names: the editor still shows it and the CLI prints its arithmetic; `ok` stays False.
    result.config = config
    result.derived = derive(config)
    _add(result, name_the_override(fmt, check_availability(config), origin, chosen))
    if fmt == "roll":
        result.errors = [_with_removal_override(i, raw) if i.kind == "not_built" else i for i in result.errors]
    errors = {i.path for i in result.errors}
    result.warnings = [w for w in result.warnings if w.path not in errors]  # one message per field


# ---------------------------------------------------------------------------------------------
# ROLL's non-strict parsing; every error in one pass


_NAMED_OVERRIDE = re.compile(r"override (\S+=\S+|~\S+)$")


def _errors_behind(
    errors: list[ConfigIssue], source: Source, overrides: Sequence[str], source_format: str,
    env: Mapping[str, str] | None,
) -> list[ConfigIssue]:
    """The errors the file still has once the overrides that `errors` name are applied: an importer's refusal
    (a `???`, a recipe key) would otherwise hide the schema's, the rules' and the engines' errors behind it."""
    named = [m.group(1) for m in (_NAMED_OVERRIDE.search(i.message) for i in errors) if m]
    if not named or all(o in overrides for o in named):
        return []
    later = validate_config(source, [*overrides, *named], source_format, env=env)
    seen = {i.path for i in errors}
    return [i for i in later.errors if i.path not in seen]


def _drop_what_roll_ignores(
    native: dict[str, Any], config: PipelineConfig | None, issues: list[ConfigIssue]
) -> tuple[dict[str, Any], PipelineConfig | None, list[ConfigIssue], list[ConfigIssue]]:
    """Unknown keys that ROLL hands to an engine (`strategy_config`) or drops (roll_keys.ignored_by_roll) become
    warnings saying what happens to them, and leave the config; the rest stay errors."""
    warnings: list[ConfigIssue] = []
    for _ in range(3):  # a dropped key can unmask another section's unknown keys
        ignored = [i for i in issues if i.message.startswith("unknown key") and _roll_ignores(i, native)]
        if not ignored:
            break
        warnings += [warning(i.path, _ignored_message(i, native)) for i in ignored]
        native = _without(native, [i.path for i in ignored])
        config, issues = build_config(native)
    return native, config, issues, warnings


def _roll_ignores(issue: ConfigIssue, native: Mapping[str, Any]) -> bool:
    """ROLL drops the key, or hands it to the engine; a misspelt key of the typed strategy_config (did you mean
    one of its fields, and no argument of the engine) stays an error: the setting it meant would not act."""
    parts = issue.path.split(".")
    if "strategy_config" not in parts[:-1]:
        return roll_keys.ignored_by_roll(parts[:-1], parts[-1])
    strategy = _value_at(native, [*parts[: parts.index("strategy_config")], "strategy_name"])
    return "did you mean" not in issue.message or bool(roll_keys.takes(str(strategy), parts[-1]))


def _ignored_message(issue: ConfigIssue, native: Mapping[str, Any]) -> str:
    parts = issue.path.split(".")
    if "strategy_config" in parts[:-1]:
        strategy = _value_at(native, [*parts[: parts.index("strategy_config")], "strategy_name"])
        return roll_keys.engine_key_message(parts[-1], str(strategy))
    return f"{issue.message} (ROLL ignores it here, as PolicyLab does)"


def _value_at(tree: Mapping[str, Any], parts: Sequence[str]) -> Any:
    node: Any = tree
    for part in parts:
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _without(tree: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """A copy of `tree` without the keys at the dotted `paths` (sections along the way are copied)."""
    out = dict(tree)
    for path in paths:
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, Mapping):
                node = None
                break
            node[part] = dict(child)
            node = node[part]
        if isinstance(node, dict):
            node.pop(last, None)
    return out


def _behind_schema_errors(
    native: Mapping[str, Any], errors: list[ConfigIssue], fmt: str, origin: Mapping[str, str]
) -> list[ConfigIssue]:
    """The rules' and engines' errors of the config as it would be without the values the schema refused, so that
    one pass reports them all (a refused value falls back to its default; its own error stays)."""
    pruned, config = dict(native), None
    paths = [i.path for i in errors if i.path]
    for _ in range(4):
        pruned = _without(pruned, paths)
        config, issues = build_config(pruned)
        if config is not None or not issues:
            break
        paths = [i.path for i in issues if i.path]
    if config is None:
        return []
    found = [i for i in in_source_terms(check_rules(config), fmt, origin) if i.severity == "error"]
    chosen = {f"{role}.strategy_args.strategy_name": strategy_name(role.split(".")[0], worker)
              for role, worker in roles(config).items()}
    found += [i for i in name_the_override(fmt, check_availability(config), origin, chosen) if i.severity == "error"]
    # Not the refused values again, nor a sibling's "is required" that only their removal caused.
    refused = [i.path for i in errors]
    sections = {p.rpartition(".")[0] for p in refused}
    return [i for i in found if not any(i.path == p or i.path.startswith(f"{p}.") for p in refused)
            and not ("is required" in i.message and i.path.rpartition(".")[0] in sections)]


_OVERRIDE_AT_END = re.compile(r"(?P<sep>[;:] )?override (?P<op>~?)(?P<key>[\w.\-]+)(?P<value>=\S+)?$")


def in_source_terms(issues: list[ConfigIssue], fmt: str, origin: Mapping[str, str]) -> list[ConfigIssue]:
    """A rule's override names a native key; in a translated file it must name the key of that file which set the
    value (`origin`), or, where no key of the file did, the override is left out rather than named wrongly."""
    if fmt == "roll":
        return issues
    out = []
    for issue in issues:
        match = _OVERRIDE_AT_END.search(issue.message)
        if match is None:
            out.append(issue)
            continue
        source = origin.get(match["key"]) or _source_key(fmt, match["key"])
        tail = f"{match['sep'] or ''}override {match['op']}{source}{match['value'] or ''}" if source else ""
        out.append(dataclasses.replace(issue, message=issue.message[: match.start()] + tail))
    return out


def _source_key(fmt: str, native: str) -> str | None:
    """The key of format `fmt` that the importer's rule table writes to the native path (first such rule)."""
    return next((rule.source for rule in rules_of(fmt) if rule.target == native and not rule.derived), None)


def _with_removal_override(issue: ConfigIssue, raw: Mapping[str, Any]) -> ConfigIssue:
    """A schema error of a key the file sets names the override that removes it (its default then applies)."""
    parts = issue.path.split(".")
    if "override " in issue.message or not issue.path or _value_at(raw, parts) is None:
        return issue
    model = model_at(parts[:-1], raw)
    info = model.model_fields.get(parts[-1]) if model is not None else None
    if info is not None and info.is_required():
        return issue  # removing it would only trade this error for "is required"
    return dataclasses.replace(issue, message=f"{issue.message}; override ~{issue.path}")


# ---------------------------------------------------------------------------------------------
# schema errors -> ConfigIssues


def _outside(issues: list[ConfigIssue], reported: list[ConfigIssue]) -> list[ConfigIssue]:
    """`issues` of fields (and their items) that `reported` says nothing about: one message per field."""
    paths = [r.path for r in reported]
    return [i for i in issues if not any(i.path == p or i.path.startswith(f"{p}.") for p in paths)]


def build_config(raw: Mapping[str, Any]) -> tuple[PipelineConfig | None, list[ConfigIssue]]:
    try:
        return PipelineConfig.model_validate(dict(raw)), []
    except ValidationError as exc:
        return None, pydantic_issues(exc, raw)


def pydantic_issues(exc: ValidationError, raw: Mapping[str, Any]) -> list[ConfigIssue]:
    """One ConfigIssue per field path; union branches that all failed are merged into one message."""
    by_path: dict[str, list[str]] = {}
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        kind = err["type"]
        path = ".".join(str(part) for part in loc)
        ctx = err.get("ctx") or {}
        if kind == "extra_forbidden":
            message = _unknown_key_message(loc, raw)
        elif kind == "union_tag_invalid":
            path = f"{path}.strategy_name"
            message = _choice_message(str(ctx.get("tag")), list(STRATEGY_ARGS_MODELS), "strategy_name")
        elif kind == "union_tag_not_found":
            path = f"{path}.strategy_name"
            message = f"strategy_name is required; choose one of {', '.join(STRATEGY_ARGS_MODELS)}"
        elif kind == "literal_error":
            message = _literal_message(err.get("input"), str(ctx.get("expected", "")))
        elif kind == "missing":
            message = "is required but missing"
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            message = f"must be a section (a mapping of keys), got {_short(err.get('input'))}"
        elif kind == "value_error":
            message = str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
        else:
            message = f"{err['msg']} (got {_short(err.get('input'))})"
        messages = by_path.setdefault(path, [])
        if message not in messages:
            messages.append(message)
    issues = []
    for path, messages in by_path.items():
        text = messages[0] if len(messages) == 1 else "invalid value: " + "; or ".join(messages)
        issues.append(ConfigIssue(path, text))
    return issues


def _literal_message(value: Any, expected: str) -> str:
    choices = [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",")]
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{_short(value)} is not valid; choose one of {expected}{hint}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _clean_loc(loc: Sequence[Any]) -> list[Any]:
    """Drop pydantic's union-branch tags ('str', 'list[int]', 'megatron_train', …) from a location."""
    out: list[Any] = []
    for part in loc:
        if isinstance(part, str):
            if out and out[-1] == "strategy_args" and part in STRATEGY_ARGS_MODELS:
                continue
            if part in _TYPE_TAGS or ("[" in part and part.endswith("]")):
                continue
        out.append(part)
    return out


def _choice_message(value: str, choices: Sequence[str], what: str) -> str:
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown {what} {value!r}; choose one of {', '.join(choices)}{hint}"


def _unknown_key_message(loc: Sequence[Any], raw: Mapping[str, Any]) -> str:
    key = str(loc[-1])
    model = model_at(loc[:-1], raw)
    valid = sorted(model.model_fields) if model is not None else []
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]}?"
    elsewhere = key_locations().get(key)
    if elsewhere:
        role = str(loc[0]) if loc else ""
        if role in ("actor_train", "actor_infer", "reference", "critic", "validation"):
            elsewhere = [p.replace("<worker>", role) for p in elsewhere]
        elif role == "rewards" and len(loc) > 2:
            elsewhere = [p.replace("<worker>", f"rewards.{loc[1]}") for p in elsewhere]
        here = ".".join(str(part) for part in loc[:-1])
        elsewhere = [p for p in elsewhere if p != here]  # another strategy's section of the same path: not "here"
    if elsewhere:
        places = " or ".join(elsewhere[:3])
        where = " (<worker> = actor_train, actor_infer, reference, critic or validation)" if "<worker>" in places else ""
        return f"unknown key {key!r} here; it belongs in {places}{where}"
    if valid:
        shown = ", ".join(valid[:25]) + (", …" if len(valid) > 25 else "")
        return f"unknown key {key!r}; valid keys here: {shown}"
    return f"unknown key {key!r}"


def model_at(path: Sequence[Any], raw: Mapping[str, Any]) -> type[BaseModel] | None:
    """The section model at a dotted location (strategy_args picked by its strategy_name)."""
    model: type[BaseModel] | None = PipelineConfig
    node: Any = raw
    i = 0
    while i < len(path):
        part = path[i]
        if model is None or part not in model.model_fields:
            return None
        node = node.get(part) if isinstance(node, Mapping) else None
        models, is_dict = models_in(model.model_fields[part].annotation)
        if is_dict:
            i += 1
            if i >= len(path):
                return None
            node = node.get(path[i]) if isinstance(node, Mapping) else None
        if len(models) > 1:
            name = node.get("strategy_name") if isinstance(node, Mapping) else None
            model = STRATEGY_ARGS_MODELS.get(name) if isinstance(name, str) else None
        else:
            model = models[0] if models else None
        i += 1
    return model


# ---------------------------------------------------------------------------------------------
# cross-field rules: each knob family's checks (trainer/config/checks/), in the order their findings are listed


def check_rules(config: PipelineConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for rule in (
        check_strategies,
        check_devices,
        check_parallel_sizes,
        check_batch_arithmetic,
        check_deepspeed_owned_keys,
        check_deepspeed_forward_only,
        check_lengths,
        check_data,
        check_algorithm,
        check_rewards,
        check_agentic,
        check_step_estimators,
        check_checkpointing,
        check_async_rollout,
        check_dynamic_sampling,
        check_train_infer_correction,
        check_domains,
        check_micro_batching,
        check_lora,
        check_adapters,
        check_freezing,
        check_profiling,
        check_suspicious,
        check_inactive_fields,
        tiny_issues,
    ):
        issues.extend(rule(config))
    return issues


# ---------------------------------------------------------------------------------------------
# derived values


def derive(config: PipelineConfig) -> dict[str, Any]:
    """Numbers a user wants to see before launching: batch sizes, dp sizes, steps."""
    derived: dict[str, Any] = {
        "rollout_samples_per_step": samples_per_rollout(config),
        "sequence_length": config.sequence_length or config.prompt_length + config.response_length,
        "ppo_epochs": config.ppo_epochs,
        "num_nodes": num_nodes(config),
    }
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        derived[f"{role}.strategy"] = strategy_name(kind, worker)
        derived[f"{role}.world_size"] = world_size(kind, worker)
        if kind in TRAINING_ROLES:
            shape = train_shape(config, kind)
            derived[f"{role}.dp_size"] = shape.dp
            derived[f"{role}.global_train_batch"] = shape.global_batch
            derived[f"{role}.optimizer_steps_per_rollout"] = shape.optimizer_steps_per_rollout
            derived[f"{role}.total_optimizer_steps"] = shape.optimizer_steps_per_rollout * config.max_steps
        if kind == "actor_infer":
            derived[f"{role}.devices_per_engine"] = devices_per_worker(kind, worker)
    return derived
