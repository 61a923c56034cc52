"""Validate a config: schema errors and cross-field rules, ALL at once, as ConfigIssues.

validate_config never raises for bad input: load errors, schema errors (with dotted paths and the
closest valid key name) and the cross-field rules below all become ConfigIssues.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from trainer.config import roll_keys
from trainer.config.bounds import check_integers
from trainer.config.bubblewrap import local_sandbox_refusal
from trainer.config.confinement import tiny_issues
from trainer.config.importers import detect_and_translate_traced, rules_of
from trainer.config.importers.engines import name_the_override
from trainer.config.introspect import key_locations, models_in
from trainer.config.issues import ConfigError, ConfigIssue, ValidationResult
from trainer.config.loading import helper_variables, load_raw_with_issues
from trainer.config.outbound import OutboundRefused, precheck
from trainer.config.presets import owned_key_conflicts
from trainer.config.registries import (
    BUILT_STRATEGIES,
    ENV_TYPES,
    REWARD_TYPES,
    ROLE_STRATEGIES,
    ROLL_ENV_MANAGERS,
    ROLL_REWARD_WORKERS,
    ROLL_UNSUPPORTED_ENV_MANAGERS,
    ROLL_UNSUPPORTED_REWARD_WORKERS,
    TOOL_CALL_ENV_TYPES,
)
from trainer.config.schema import (
    AGENTIC_ADV_ESTIMATORS,
    STRATEGY_ARGS_MODELS,
    UNBUILT_ADV_ESTIMATORS,
    DatasetFilter,
    DeepSpeedConfig,
    Fsdp2Config,
    MegatronConfig,
    PipelineConfig,
    SglangConfig,
    VllmConfig,
    WorkerConfig,
    field_status,
)
from trainer.config.topology import (
    TRAINING_ROLES,
    devices_per_worker,
    domain_batch_sizes,
    duplicate_devices,
    num_nodes,
    roles,
    rollout_schedule,
    samples_per_rollout,
    strategy_config,
    strategy_name,
    train_shape,
    world_size,
)

Source = str | Path | Mapping[str, Any]
GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
_TYPE_TAGS = {"str", "int", "float", "bool", "none", "dict", "list"}
# ROLL environments that play a built game through another runner (ROCK's sandbox, the agent-native env manager).
NEAREST_ENV = {"sokoban_sandbox": "sokoban", "sokoban_native_env": "sokoban"}


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
        warnings += [_warning(i.path, _ignored_message(i, native)) for i in ignored]
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
# facts about roles


# ---------------------------------------------------------------------------------------------
# cross-field rules


def check_rules(config: PipelineConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for rule in (
        _check_strategies,
        _check_devices,
        _check_parallel_sizes,
        _check_batch_arithmetic,
        _check_deepspeed_owned_keys,
        _check_deepspeed_forward_only,
        _check_lengths,
        _check_data,
        _check_algorithm,
        _check_rewards,
        _check_agentic,
        _check_step_estimators,
        _check_checkpointing,
        _check_async_rollout,
        _check_dynamic_sampling,
        _check_train_infer_correction,
        _check_domains,
        _check_micro_batching,
        _check_lora,
        _check_adapters,
        _check_freezing,
        _check_profiling,
        _check_suspicious,
        _check_inactive_fields,
        tiny_issues,
    ):
        issues.extend(rule(config))
    return issues


def _error(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path, message, "error")


def _warning(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path, message, "warning")


def _check_strategies(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        name = strategy_name(kind, worker)
        allowed = ROLE_STRATEGIES[kind]
        if name not in allowed:
            issues.append(
                _error(
                    f"{role}.strategy_args.strategy_name",
                    f"{name} cannot run {kind}; choose one of {', '.join(allowed)}",
                )
            )
        if worker.worker_cls is not None and kind != "rewards":
            issues.append(_warning(f"{role}.worker_cls", "ignored: the trainer picks the worker for this role"))
    return issues


NOT_BUILT = "is not built in this version of PolicyLab"


def check_availability(config: PipelineConfig) -> list[ConfigIssue]:
    """What this build cannot run, checked after the rules (the config may be coherent and still
    name a backend that does not exist yet): one error per role, listing what the role may use."""
    issues = []
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        name = strategy_name(kind, worker)
        if name in ROLE_STRATEGIES[kind] and name not in BUILT_STRATEGIES:
            built = [n for n in ROLE_STRATEGIES[kind] if n in BUILT_STRATEGIES]
            issues.append(ConfigIssue(f"{role}.strategy_args.strategy_name",
                                      f"{name} {NOT_BUILT}; available for {kind}: {', '.join(built)}",
                                      kind="not_built"))
        cfg = strategy_config(worker)
        if isinstance(cfg, Fsdp2Config) and cfg.ulysses_sequence_parallel_size > 1:
            issues.append(ConfigIssue(f"{role}.strategy_args.strategy_config.ulysses_sequence_parallel_size",
                                      f"Ulysses sequence parallelism {NOT_BUILT}; valid: 1", kind="not_built"))
        if isinstance(cfg, MegatronConfig) and cfg.context_parallel_size > 1:
            issues.append(ConfigIssue(f"{role}.strategy_args.strategy_config.context_parallel_size",
                                      f"Megatron context parallelism {NOT_BUILT}; valid: 1", kind="not_built"))
    for name, reward in config.rewards.items():
        if reward.worker_cls in ROLL_UNSUPPORTED_REWARD_WORKERS:
            what = ROLL_UNSUPPORTED_REWARD_WORKERS[reward.worker_cls]
            issues.append(ConfigIssue(f"rewards.{name}.worker_cls", f"{what} ({reward.worker_cls}) {NOT_BUILT}; the "
                                      f"other rewards train without this domain: override ~rewards.{name}",
                                      kind="not_built"))
        judge_strategy = strategy_name(f"rewards.{name}", reward)
        is_judge = "llm_judge" in (reward.reward_type, ROLL_REWARD_WORKERS.get(reward.worker_cls or ""))
        if is_judge and reward.judge_model_type == "inference" and judge_strategy not in ("hf_infer", "vllm"):
            issues.append(ConfigIssue(f"rewards.{name}.strategy_args.strategy_name", f"an inference judge on "
                                      f"{judge_strategy} {NOT_BUILT}; valid: hf_infer, vllm (or judge_model_type: "
                                      "api with a vLLM OpenAI server)", kind="not_built"))
    variant = config.actor_train.pg_variant
    if variant is not None and variant not in PG_VARIANTS_BUILT:
        issues.append(ConfigIssue("actor_train.pg_variant", f"{variant!r} {NOT_BUILT}; valid: "
                                  f"{', '.join(PG_VARIANTS_BUILT)}", kind="not_built"))
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is not None and worker.model_args.lora_target is not None and strategy_name(role, worker) == "megatron_train":
            issues.append(ConfigIssue(f"{role}.model_args.lora_target", f"LoRA on megatron_train {NOT_BUILT} (PEFT adapts "
                                      "Hugging Face modules, not megatron-core's); train adapters with torch_train, "
                                      "fsdp2_train or deepspeed_train; without LoRA megatron_train trains the full "
                                      f"model: override ~{role}.model_args.lora_target", kind="not_built"))
        if (worker is not None and worker.model_args.freeze_module_prefix is not None
                and worker.model_args.lora_target is None and strategy_name(role, worker) == "megatron_train"):
            issues.append(ConfigIssue(f"{role}.model_args.freeze_module_prefix", f"partial freezing on megatron_train "
                                      f"{NOT_BUILT} (the prefixes name Hugging Face parameters; megatron-core's differ); "
                                      "use torch_train, fsdp2_train or deepspeed_train; without it every parameter "
                                      f"trains: override ~{role}.model_args.freeze_module_prefix", kind="not_built"))
    if config.adv_estimator in UNBUILT_ADV_ESTIMATORS:
        built = [e for e in typing.get_args(PipelineConfig.model_fields["adv_estimator"].annotation)
                 if e not in UNBUILT_ADV_ESTIMATORS]
        issues.append(ConfigIssue("adv_estimator", f"{config.adv_estimator} {NOT_BUILT}; valid: {', '.join(built)}",
                                  kind="not_built"))
    return issues


def _check_devices(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    capacity = (config.num_nodes or 0) * config.num_gpus_per_node
    for role, worker in roles(config).items():
        path = f"{role}.device_mapping"
        mapping = worker.device_mapping
        kind = role.split(".")[0]
        if mapping is not None:
            if not mapping:
                issues.append(_error(path, "is empty; list at least one device id or leave it unset for CPU"))
                continue
            duplicates = duplicate_devices(mapping)
            if duplicates:
                issues.append(_error(path, f"lists device(s) {duplicates} more than once"))
            outside = sorted(d for d in set(mapping) if d < 0 or (config.num_nodes and d >= capacity))
            if any(d < 0 for d in outside):
                issues.append(_error(path, f"device ids must be >= 0, got {[d for d in outside if d < 0]}"))
            elif outside:
                issues.append(
                    _error(
                        path,
                        f"device ids {outside} are outside the cluster: num_nodes × num_gpus_per_node = "
                        f"{config.num_nodes} × {config.num_gpus_per_node} gives ids 0..{capacity - 1}",
                    )
                )
            per_worker = devices_per_worker(kind, worker)
            engine_sized = strategy_name(kind, worker) in ("vllm", "sglang")  # checked with parallel sizes
            if len(mapping) % per_worker and not engine_sized:
                issues.append(
                    _error(
                        f"{role}.num_gpus_per_worker",
                        f"{per_worker} devices per worker does not divide the {len(mapping)} devices of "
                        f"device_mapping; use a divisor of {len(mapping)}",
                    )
                )
            elif worker.world_size is not None and worker.world_size != len(mapping) // per_worker:
                issues.append(
                    _error(
                        f"{role}.world_size",
                        f"is {worker.world_size} but device_mapping gives {len(mapping) // per_worker} workers "
                        f"({len(mapping)} devices / {per_worker} per worker); remove world_size or make them agree",
                    )
                )
        if (
            kind == "actor_infer"
            and strategy_name(kind, worker) in ("vllm", "sglang")
            and "num_gpus_per_worker" in worker.model_fields_set
            and worker.num_gpus_per_worker != devices_per_worker(kind, worker)
        ):
            issues.append(
                _warning(
                    f"{role}.num_gpus_per_worker",
                    f"ignored: an engine uses its parallel size ({devices_per_worker(kind, worker)} devices)",
                )
            )
    return issues


def _check_parallel_sizes(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        cfg = strategy_config(worker)
        base = f"{role}.strategy_args.strategy_config"
        world = world_size(kind, worker)
        if isinstance(cfg, MegatronConfig):
            tp, pp, cp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size
            model_parallel = tp * pp * cp
            if world % model_parallel:
                issues.append(
                    _error(
                        f"{base}.tensor_model_parallel_size",
                        f"TP × PP × CP = {tp} × {pp} × {cp} = {model_parallel} does not divide the role's "
                        f"{world} devices; use sizes whose product divides {world}",
                    )
                )
            etp = cfg.expert_tensor_parallel_size or tp
            expert_group = cfg.expert_model_parallel_size * etp * pp
            if (cfg.expert_model_parallel_size > 1 or cfg.expert_tensor_parallel_size) and world % expert_group:
                issues.append(
                    _error(
                        f"{base}.expert_model_parallel_size",
                        f"EP × expert TP × PP = {cfg.expert_model_parallel_size} × {etp} × {pp} = {expert_group} "
                        f"does not divide the role's {world} devices",
                    )
                )
            if cfg.virtual_pipeline_model_parallel_size is not None and pp == 1:
                issues.append(
                    _error(
                        f"{base}.virtual_pipeline_model_parallel_size",
                        "needs pipeline_model_parallel_size > 1; unset it or raise the pipeline size",
                    )
                )
            if cfg.sequence_parallel and tp == 1:
                issues.append(_warning(f"{base}.sequence_parallel", "has no effect with tensor_model_parallel_size 1"))
        if isinstance(cfg, VllmConfig | SglangConfig) and worker.device_mapping:
            engine = devices_per_worker(kind, worker)
            field = "tp_size" if isinstance(cfg, SglangConfig) else "tensor_parallel_size"
            if len(worker.device_mapping) % engine:
                issues.append(
                    _error(
                        f"{base}.{field}",
                        f"one engine needs {engine} devices, which does not divide the {len(worker.device_mapping)} "
                        "devices of device_mapping",
                    )
                )
        if isinstance(cfg, Fsdp2Config):
            if cfg.fsdp_size > 0 and world % cfg.fsdp_size:
                issues.append(
                    _error(f"{base}.fsdp_size", f"{cfg.fsdp_size} does not divide the role's {world} ranks; "
                           "use a divisor or -1")
                )
            if world % cfg.ulysses_sequence_parallel_size:
                issues.append(
                    _error(f"{base}.ulysses_sequence_parallel_size",
                           f"{cfg.ulysses_sequence_parallel_size} does not divide the role's {world} ranks")
                )
    return issues


def _nearest_divisor(n: int, target: int, search: int = 100_000) -> int:
    """The divisor of n closest to target (smaller one on ties); bounded work for huge n."""
    for delta in range(search):
        for candidate in (target - delta, target + delta):
            if 1 <= candidate <= n and n % candidate == 0:
                return candidate
    return n


def _small_divisors(n: int, limit: int = 64) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _batch_issue(config: PipelineConfig, role: str, worker: WorkerConfig) -> ConfigIssue | None:
    shape = train_shape(config, role)
    if shape.whole:
        return None
    samples, dp, micro, accum, step = shape.samples, shape.dp, shape.micro_batch, shape.grad_accum, shape.global_batch
    head = (
        f"rollout_batch_size × num_return_sequences_in_group = {config.rollout_batch_size} × "
        f"{config.num_return_sequences_in_group} = {samples} samples per step is not a whole number of optimizer "
        f"steps of per_device_train_batch_size × gradient_accumulation_steps × dp = {micro} × {accum} × {dp} = {step}"
    )
    path = f"{role}.training_args.gradient_accumulation_steps"
    if samples % (micro * dp) == 0:
        per_rank = samples // (micro * dp)
        best = _nearest_divisor(per_rank, accum)
        steps = per_rank // best
        hint = f"; gradient_accumulation_steps = {best} works ({steps} optimizer step{'s' if steps > 1 else ''} per rollout)"
        if steps > 1:
            hint += f", {per_rank} gives one step per rollout"
        hint += f"; override {path}={best}"
    elif samples % dp == 0:
        path = f"{role}.training_args.per_device_train_batch_size"
        options = _small_divisors(samples // dp)
        hint = f"; per_device_train_batch_size must divide {samples // dp}, e.g. one of {options[-6:]}"
    else:
        path = "rollout_batch_size"
        need = dp // math.gcd(dp, config.num_return_sequences_in_group)
        hint = f"; the data-parallel size {dp} does not divide {samples}: make rollout_batch_size a multiple of {need}"
    return _error(path, head + hint)


def _check_batch_arithmetic(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is not None:
            issue = _batch_issue(config, role, worker)
            if issue is not None:
                issues.append(issue)
    return issues


def _check_deepspeed_forward_only(config: PipelineConfig) -> list[ConfigIssue]:
    """deepspeed_infer (a forward-only role) has no optimizer, gradients or batches to shard: say which
    of the settings it was given cannot act (ROLL's presets are shared by training and reference roles)."""
    issues = []
    for role, worker in roles(config).items():
        cfg = strategy_config(worker)
        if strategy_name(role.split(".")[0], worker) != "deepspeed_infer" or not isinstance(cfg, DeepSpeedConfig):
            continue
        ignored = [key for key in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                   "gradient_accumulation_steps", "gradient_clipping")
                   if getattr(cfg, key) not in (None, "auto")]
        if cfg.zero_optimization.offload_optimizer is not None:
            ignored.append("zero_optimization.offload_optimizer")
        if cfg.zero_optimization.stage in (1, 2):
            ignored.append(f"zero_optimization.stage {cfg.zero_optimization.stage} (runs as 0; 3 partitions parameters)")
        if ignored:
            issues.append(_warning(f"{role}.strategy_args.strategy_config",
                                   f"forward-only role: no effect from {', '.join(ignored)}"))
    return issues


def _check_deepspeed_owned_keys(config: PipelineConfig) -> list[ConfigIssue]:
    """DeepSpeed's batch keys and gradient_clipping are derived (presets.owned_key_conflicts): a
    strategy_config may write auto or the same value, never another one."""
    issues = []
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        cfg = strategy_config(worker) if worker is not None else None
        if isinstance(cfg, DeepSpeedConfig):
            conflicts = owned_key_conflicts(cfg, train_shape(config, role), worker.training_args.max_grad_norm)
            issues.extend(_error(f"{role}.strategy_args.strategy_config.{key}", why) for key, why in conflicts.items())
    return issues


def _check_lengths(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    total = config.prompt_length + config.response_length
    if config.sequence_length is not None and config.sequence_length < total:
        issues.append(
            _error(
                "sequence_length",
                f"{config.sequence_length} is shorter than prompt_length + response_length = "
                f"{config.prompt_length} + {config.response_length} = {total}; override sequence_length={total}",
            )
        )
    for role in ("actor_infer", "validation"):
        worker = getattr(config, role)
        if worker is None:
            continue
        cfg = strategy_config(worker)
        base = f"{role}.strategy_args.strategy_config"
        limit_field, limit = None, None
        if isinstance(cfg, VllmConfig):
            limit_field, limit = "max_model_len", cfg.max_model_len
        elif isinstance(cfg, SglangConfig):
            limit_field, limit = "context_length", cfg.context_length
        if limit is not None and limit < total:
            issues.append(
                _error(
                    f"{base}.{limit_field}",
                    f"{limit} is shorter than prompt_length + response_length = {config.prompt_length} + "
                    f"{config.response_length} = {total}; raise it to at least {total}; override {base}.{limit_field}={total}",
                )
            )
        gen = worker.generating_args
        too_long = gen is not None and (gen.max_new_tokens or 0) > config.response_length
        if role == "actor_infer" and too_long:
            issues.append(
                _error(
                    f"{role}.generating_args.max_new_tokens",
                    f"{gen.max_new_tokens} exceeds response_length {config.response_length}; "
                    "use at most response_length (e.g. ${response_length}); override "
                    f"{role}.generating_args.max_new_tokens={config.response_length}",
                )
            )
    return issues


def _check_data(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        data = worker.data_args
        if data is None:
            continue
        if data.prompt is not None and data.messages is not None:
            issues.append(_error(f"{role}.data_args.messages", "cannot be used together with prompt; keep one"))
        if data.file_name is not None and data.synthetic is not None:
            issues.append(_error(f"{role}.data_args.synthetic", "cannot be used together with file_name; keep one"))
    agentic = config.train_env_manager is not None
    data = config.actor_train.data_args
    if not agentic and (data is None or (data.file_name is None and data.synthetic is None)):
        issues.append(
            _error(
                "actor_train.data_args",
                "training prompts are missing: set data_args.file_name (a data file) or data_args.synthetic "
                "(a built-in task)",
            )
        )
    return issues


def _check_algorithm(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    if config.adv_estimator == "gae" and config.critic is None:
        issues.append(_error("critic", "adv_estimator gae needs a critic section (a value model); without one, "
                             "REINFORCE++ is the nearest built estimator: override adv_estimator=reinforce_plus_plus"))
    if config.critic is not None and config.adv_estimator != "gae":
        issues.append(_warning("critic", f"unused: adv_estimator {config.adv_estimator} does not use a value model"))
    if config.use_kl_loss and config.add_token_level_kl:
        issues.append(
            _warning("use_kl_loss", "KL is applied twice (in the reward and as a loss); usually only one is wanted")
        )
    if (config.use_kl_loss or config.add_token_level_kl) and config.reference is None:
        issues.append(_error("reference", "KL (use_kl_loss / add_token_level_kl) needs a reference section"))
    if config.kl_ctrl_type == "adaptive" and config.target_kl is None:
        issues.append(_error("target_kl", "kl_ctrl_type adaptive needs a target_kl to steer toward"))
    if config.kl_ctrl_type == "fixed" and config.target_kl is not None:
        issues.append(
            _warning("target_kl", "unused: kl_ctrl_type fixed keeps init_kl_coef (set kl_ctrl_type: adaptive)")
        )
    elif (config.kl_ctrl_type == "adaptive" or config.target_kl is not None) and not config.add_token_level_kl:
        issues.append(_warning("target_kl", "unused: the KL controller only sets the KL penalty in the reward, "
                               "and add_token_level_kl is off"))
    issues += _policy_loss_issues(config)
    return issues


# the roles whose micro-batches the knobs cut: training (actor_train, critic) and forward-only passes
MICRO_BATCH_PHASES = {"actor_train": ("train", "infer"), "critic": ("train", "infer"), "reference": ("infer",)}
PACKING_ARGS = ("algorithm", "max_packed_sequence_length_train", "max_packed_sequence_length_forward",
                "min_num_micro_batches_train", "min_num_micro_batches_forward")


def _check_micro_batching(config: PipelineConfig) -> list[ConfigIssue]:
    """Token-budget micro-batches (ROLL use_dynamic_batching_in_train/infer, verl use_dynamic_bsz) and sequence
    packing (use_sequence_packing) act on actor_train and critic (training and forward passes) and the
    reference (forward passes), on every strategy but Megatron's; each budget must be set with its switch, and
    one role takes one of the two budget spellings (trainer.models.micro_batches)."""
    issues = []
    for role, worker in roles(config).items():
        phases = MICRO_BATCH_PHASES.get(role, ())
        switches = {"use_dynamic_batching_in_train": "train", "use_dynamic_batching_in_infer": "infer",
                    "use_dynamic_bsz": "", "use_sequence_packing": ""}
        acting = {name: bool(phases) and (not phase or phase in phases) for name, phase in switches.items()}
        for name, phase in switches.items():
            if getattr(worker, name) and not acting[name]:
                acts = ", ".join(r for r, p in MICRO_BATCH_PHASES.items() if not phase or phase in p)
                issues.append(_warning(f"{role}.{name}", f"no effect on {role}: it cuts the micro-batches of {acts}"))
        if not phases:
            continue
        name = strategy_name(role, worker)
        if name.startswith("megatron"):
            issues += [_warning(f"{role}.{knob}", f"not built on {name} (GPU-only Megatron runs its own micro-batch "
                                "schedule): its micro-batches stay fixed rows, with the same gradients; built on "
                                "torch_train, fsdp2_train/infer, deepspeed_train/infer and hf_infer")
                       for knob in switches if getattr(worker, knob)]
            continue
        if worker.use_dynamic_batching_in_train and worker.max_tokens_per_microbatch_in_train <= 0:
            issues.append(_error(f"{role}.max_tokens_per_microbatch_in_train", "use_dynamic_batching_in_train needs "
                                 "a token budget > 0 (ROLL recommends sequence length × 2 × micro-batch size)"))
        if worker.use_dynamic_batching_in_infer and "infer" in phases and worker.max_tokens_per_microbatch_in_infer is None:
            issues.append(_error(f"{role}.max_tokens_per_microbatch_in_infer", "use_dynamic_batching_in_infer needs a "
                                 "token budget (rows × padded length of one forward micro-batch)"))
        if worker.use_dynamic_bsz and worker.max_token_len_per_gpu is None:
            issues.append(_error(f"{role}.max_token_len_per_gpu", "use_dynamic_bsz needs a token budget per GPU"))
        if worker.use_dynamic_bsz and (worker.use_dynamic_batching_in_train or worker.use_dynamic_batching_in_infer):
            issues.append(_error(f"{role}.use_dynamic_bsz", "verl's use_dynamic_bsz and ROLL's "
                                 "use_dynamic_batching_in_train/infer both set the token budget; choose one"))
        args = worker.sequence_packing_args
        if not worker.use_sequence_packing:
            issues += [_error(f"{role}.sequence_packing_args.{name}", "acts only with use_sequence_packing: true; "
                              "set it, or remove this") for name in PACKING_ARGS
                       if getattr(args, name) != type(args).model_fields[name].default]
        elif args.algorithm == "load_balance":
            for phase, name in (("train", "use_dynamic_batching_in_train"), ("infer", "use_dynamic_batching_in_infer"),
                                ("", "use_dynamic_bsz")):
                if getattr(worker, name) and (not phase or phase in phases):
                    issues.append(_error(f"{role}.sequence_packing_args.algorithm", f"load_balance and {name} both "
                                         "choose the micro-batches; use algorithm none (each dynamic batch packed) "
                                         "or turn dynamic batching off"))
    return issues


PG_VARIANTS_BUILT = ("ppo", "topr")  # ROLL's pg_variant values this build runs (tis, cispo, kimi15 are not)
TOPR_WEIGHTS = ("topr_positive_weight", "topr_negative_weight")


def _policy_loss_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """GSPO clips a sequence-level ratio that stays near 1: PPO's clip range hardly ever binds. ROLL's
    pg_variant picks the objective on actor_train only; TOPR's two spellings exclude each other."""
    issues = []
    variant = config.actor_train.pg_variant
    if variant == "topr" and config.use_topr_loss:
        issues.append(_error("actor_train.pg_variant", "topr (per-token ratios) and use_topr_loss (the sequence-level "
                             "reading) are two TOPR objectives; choose one"))
    if variant == "topr" and config.policy_loss != "ppo":
        issues.append(_error("actor_train.pg_variant", f"topr replaces the policy objective; policy_loss "
                             f"{config.policy_loss} would not run (set policy_loss: ppo or drop pg_variant)"))
    if config.use_policy_loss_type == "PG":
        rival = ("use_topr_loss: true" if config.use_topr_loss else "actor_train.pg_variant: topr" if variant == "topr"
                 else f"policy_loss: {config.policy_loss}" if config.policy_loss != "ppo" else None)
        if rival:
            issues.append(_error("use_policy_loss_type", f"PG (-A * log pi) replaces the policy objective; {rival} "
                                 "names another one; choose one (use_policy_loss_type: PPO keeps the others)"))
        issues += [_warning(name, "has no effect: use_policy_loss_type PG has no ratio to clip")
                   for name in ("pg_clip", "pg_clip_low", "pg_clip_high") if name in config.model_fields_set]
        steps = train_shape(config, "actor_train").optimizer_steps_per_rollout
        if steps > 1:
            issues.append(_warning("use_policy_loss_type", f"PG takes {steps} optimizer steps on each rollout "
                                   "(ppo_epochs x mini-batches) without a ratio to pi_old: the steps after the first "
                                   "are off-policy and uncorrected (PPO's ratio and clip bound them)"))
    if variant != "topr":
        issues += [_warning(f"actor_train.{name}", "has no effect: only actor_train.pg_variant: topr reads it")
                   for name in TOPR_WEIGHTS if getattr(config.actor_train, name) != 1.0]
    for role, worker in roles(config).items():
        if role != "actor_train":
            issues += [_warning(f"{role}.{name}", "has no effect: the policy objective is actor_train's")
                       for name in ("pg_variant", *TOPR_WEIGHTS) if name in worker.model_fields_set]
    loss = ("topr" if config.use_topr_loss else "topr_token" if variant == "topr"
            else "pg" if config.use_policy_loss_type == "PG" else config.policy_loss)
    clip_low, clip_high = config.clip_range()
    if loss == "gspo" and max(clip_low, clip_high) > 0.01:
        issues.append(_warning("pg_clip", f"policy_loss gspo clips the sequence ratio at 1 - {clip_low} / "
                               f"1 + {clip_high}, which it rarely reaches; the GSPO paper uses "
                               "pg_clip_low: 3.0e-4, pg_clip_high: 4.0e-4"))
    if loss != "ppo" and config.dual_clip_loss:
        issues.append(_warning("dual_clip_loss", f"unused: the dual clip applies to policy_loss ppo, not {loss}"))
    return issues


def _check_rewards(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    if not config.rewards and config.train_env_manager is None:
        issues.append(
            _error("rewards", f"no reward worker: add one, e.g. rewards: {{math: {{reward_type: math_rule}}}} "
                   f"(reward types: {', '.join(REWARD_TYPES)})")
        )
    for name, reward in config.rewards.items():
        path = f"rewards.{name}"
        from_cls = None
        if reward.worker_cls is not None:
            if reward.worker_cls in ROLL_REWARD_WORKERS:
                from_cls = ROLL_REWARD_WORKERS[reward.worker_cls]
            elif reward.worker_cls in ROLL_UNSUPPORTED_REWARD_WORKERS:
                continue  # coherent, but not built: check_availability says so
            else:
                close = difflib.get_close_matches(reward.worker_cls, list(ROLL_REWARD_WORKERS), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                issues.append(
                    _error(
                        f"{path}.worker_cls",
                        f"unknown reward worker class; {hint}known: {', '.join(ROLL_REWARD_WORKERS)}; "
                        f"or set reward_type to one of {', '.join(REWARD_TYPES)} (classes are never imported)",
                    )
                )
                continue
        if from_cls is None and reward.reward_type is None:
            issues.append(
                _error(f"{path}.reward_type", f"is required (one of {', '.join(REWARD_TYPES)}) unless worker_cls names it")
            )
        elif from_cls is not None and reward.reward_type is not None and from_cls != reward.reward_type:
            issues.append(
                _error(f"{path}.reward_type", f"{reward.reward_type} contradicts worker_cls, which means {from_cls}")
            )
        if (reward.reward_type or from_cls) == "reward_model" and reward.model_args.model_name_or_path is None:
            issues.append(_error(f"{path}.model_args.model_name_or_path", "a reward_model reward needs a model path"))
        issues += _judge_issues(config, path, reward, (reward.reward_type or from_cls) == "llm_judge")
        issues += _outbound_issues(path, "code_url", reward.code_url)
        local = (reward.reward_type or from_cls) == "code_sandbox" and reward.use_local
        if local and (refusal := local_sandbox_refusal()):  # untrusted code runs under bubblewrap or not at all
            issues.append(_error(f"{path}.use_local", refusal.removeprefix("use_local: ")))
    return issues


JUDGE_API_FIELDS = ("judge_model_name", "judge_api_url", "judge_api_key")


def _outbound_issues(path: str, name: str, url: str | None) -> list[ConfigIssue]:
    """A URL the run will call, checked against the deployment's outbound policy (trainer.config.outbound)."""
    try:
        if url:
            precheck(url, f"{path}.{name}")
    except OutboundRefused as exc:
        return [_error(f"{path}.{name}", str(exc).removeprefix(f"{path}.{name}: "))]
    return []


def _judge_issues(config: PipelineConfig, path: str, reward: Any, is_judge: bool) -> list[ConfigIssue]:
    """An llm_judge reward's fields go together: judge_model_type api needs judge_api_url (http or https) and
    judge_model_name, inference a model; judge fields on another reward, or the other mode's, do nothing."""
    judge_fields = ("judge_prompt", "judge_model_type", *JUDGE_API_FIELDS)
    if not is_judge:
        return [_warning(f"{path}.{name}", f"has no effect: {path} is not an llm_judge reward (reward_type: "
                         "llm_judge or ROLL's LLMJudgeRewardWorker)") for name in judge_fields
                if getattr(reward, name) is not None]
    mode = reward.judge_model_type
    if mode is None:
        return [_error(f"{path}.judge_model_type", "an llm_judge reward needs it; valid: api (judge_api_url, "
                       "judge_model_name), inference (this section's model_args); a judge loaded from this section: "
                       f"override {path}.judge_model_type=inference")]
    issues = []
    if mode == "api":
        issues += [_error(f"{path}.{name}", f"judge_model_type api needs it ({description})")
                   for name, description in (("judge_api_url", "the API's base URL, e.g. https://host/v1"),
                                             ("judge_model_name", "the model name each request sends"))
                   if not getattr(reward, name)]
        issues += _outbound_issues(path, "judge_api_url", reward.judge_api_url)
    else:
        if not (reward.model_args.model_name_or_path or config.reward_pretrain):
            issues.append(_error(f"{path}.model_args.model_name_or_path", "judge_model_type inference generates "
                                 "the judgment with this section's model: set its path (or reward_pretrain)"))
        issues += [_warning(f"{path}.{name}", "has no effect: judge_model_type inference runs the section's own "
                            "model, not an API") for name in JUDGE_API_FIELDS if getattr(reward, name) is not None]
    return issues


def _check_agentic(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for name in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, name)
        if manager is None:
            continue
        if not manager.tags:
            issues.append(_error(f"{name}.tags", f"empty: name the environments to play (keys of custom_envs: "
                                 f"{', '.join(config.custom_envs) or 'none defined'})"))
        missing = [tag for tag in manager.tags if tag not in config.custom_envs]
        if missing:
            issues.append(
                _error(f"{name}.tags", f"{missing} are not defined in custom_envs ({', '.join(config.custom_envs) or 'empty'})")
            )
        if manager.n_groups is not None:
            if len(manager.n_groups) != len(manager.tags):
                issues.append(_error(f"{name}.n_groups", f"needs one entry per tag ({len(manager.tags)} tags)"))
            elif sum(manager.n_groups) != manager.env_groups:
                issues.append(
                    _error(f"{name}.n_groups", f"sums to {sum(manager.n_groups)} but env_groups is {manager.env_groups}")
                )
        batch = ("rollout_batch_size", config.rollout_batch_size) if name == "train_env_manager" \
            else ("val_batch_size", config.val_batch_size)
        issues += _env_manager_issues(name, manager, *batch)
    issues += _custom_env_issues(config)
    issues += _agentic_mode_issues(config)
    issues += _tool_call_issues(config)
    return issues


def _env_manager_issues(name: str, manager: Any, batch_name: str, batch: int) -> list[ConfigIssue]:
    """The batch fills whole groups, within max_traj_per_env episodes per environment (trainer.envs.manager)."""
    issues = []
    if batch % manager.group_size:
        issues.append(_error(f"{name}.group_size", f"{manager.group_size} does not divide {batch_name} = {batch} "
                             "trajectories, which would cut a group of equal start states"))
    rounds = math.ceil(batch / (manager.env_groups * manager.group_size))
    if 0 <= manager.max_traj_per_env < rounds:
        issues.append(_error(f"{name}.max_traj_per_env", f"{manager.max_traj_per_env}, but {batch_name} = {batch} "
                             f"trajectories from {manager.env_groups * manager.group_size} environments need "
                             f"{rounds} each; raise it (or -1), or add env_groups"))
    if manager.worker_cls is not None and manager.worker_cls not in ROLL_ENV_MANAGERS:
        what = ROLL_UNSUPPORTED_ENV_MANAGERS.get(manager.worker_cls)
        close = difflib.get_close_matches(manager.worker_cls, list(ROLL_ENV_MANAGERS), n=1, cutoff=0.6)
        why = f"the {what} is not supported yet" if what else \
            f"unknown env manager class{f'; did you mean {close[0]}?' if close else ''}"
        issues.append(_error(f"{name}.worker_cls", f"{why}; known: {', '.join(ROLL_ENV_MANAGERS)} "
                             "(classes are looked up by name, never imported)"))
    return issues


def _custom_env_issues(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    turn_default = (config.actor_infer.generating_args.max_new_tokens if config.actor_infer.generating_args
                    else None) or config.response_length
    for tag, env in config.custom_envs.items():
        if env.env_type not in ENV_TYPES:
            near = NEAREST_ENV.get(env.env_type)
            fix = (f"; the same game runs as the built {near} environment: override custom_envs.{tag}.env_type={near}"
                   if near in ENV_TYPES else "")
            issues.append(_error(f"custom_envs.{tag}.env_type", f"{env.env_type!r} is not a registered environment; "
                                 f"valid: {', '.join(ENV_TYPES)}{fix}"))
        cls = env.env_manager_cls
        if cls is not None and cls not in ROLL_ENV_MANAGERS:
            what = ROLL_UNSUPPORTED_ENV_MANAGERS.get(cls, "env manager")
            issues.append(ConfigIssue(f"custom_envs.{tag}.env_manager_cls", f"the {what} ({cls}) {NOT_BUILT}; "
                                      "built: TrajEnvManager (one conversation per row) and StepEnvManager; the "
                                      f"trajectory manager plays {tag}: override ~custom_envs.{tag}.env_manager_cls",
                                      kind="not_built"))
        turn = env.max_tokens_per_step or turn_default
        if turn > config.response_length:
            issues.append(_error(f"custom_envs.{tag}.max_tokens_per_step", f"{turn} tokens per turn exceed "
                                 f"response_length = {config.response_length}, which holds every turn of a trajectory; "
                                 f"override custom_envs.{tag}.max_tokens_per_step={config.response_length}"))
        elif turn == config.response_length and config.train_env_manager is not None:
            issues.append(_warning(f"custom_envs.{tag}.max_tokens_per_step", "unset, so each turn may take all of "
                                   "response_length and a trajectory has room for one turn; set it"))
    from trainer.envs.roll_env_config import env_config_errors

    # what the played environments would refuse when built (ROLL's env_config keys: trainer.envs.roll_env_config)
    return issues + [_error(path, message) for path, message in env_config_errors(config)]


def _tool_call_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """parse_tool_call_parameter_to_dict acts only on the tool-calling environments an agentic run plays."""
    if not config.parse_tool_call_parameter_to_dict:
        return []
    managers = [m for m in (config.train_env_manager, config.val_env_manager) if m is not None]
    types = {config.custom_envs[tag].env_type for m in managers for tag in m.tags if tag in config.custom_envs}
    if types & set(TOOL_CALL_ENV_TYPES):
        return []
    return [_warning("parse_tool_call_parameter_to_dict", "unused: no environment played takes tool calls "
                     f"(env_type {', '.join(TOOL_CALL_ENV_TYPES)} of an agentic run)")]


def _agentic_mode_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """What the agentic pipeline does without, and agentic knobs set for an RLVR run."""
    if config.train_env_manager is None:
        unused = [(path, getattr(config, path)) for path in ("val_env_manager", "reward_normalization",
                                                              "render_save_dir")]
        return [_warning(path, "unused: only the agentic pipeline reads it (set train_env_manager)")
                for path, value in unused if value is not None]
    issues = []
    if rollout_schedule(config).mode != "sync":
        issues.append(_error("rollout_mode", f"{rollout_schedule(config).mode}: the agentic pipeline runs "
                             "rollout_mode sync only (async_generation_ratio 0)"))
    if config.difficulty_loss_weight:
        issues.append(_error("difficulty_loss_weight", "needs a `difficulty` per prompt; agentic runs have none"))
    if config.num_return_sequences_in_group != 1:
        issues.append(_warning("num_return_sequences_in_group", "unused by the agentic pipeline: "
                               "train_env_manager.group_size sets how many trajectories share a start state"))
    if config.rewards:
        issues.append(_warning("rewards", "unused by the agentic pipeline: its environments give the rewards"))
    return issues


# the knobs each step-wise estimator reads (trainer.algorithms.step_advantages)
STEP_ESTIMATOR_KNOBS = {"episode_reward_weight": ("gigpo",), "step_reward_weight": ("gigpo",),
                        "step_reward_gamma": ("gigpo", "step_reinforce")}
# the RLVR reward processing of a trajectory's score (rewarding.process_scores), which gigpo and
# step_reinforce replace by per-turn values
SCORE_PROCESSING_KNOBS = ("reward_clip", "add_len_reward", "norm_mean_type", "norm_std_type", "reward_shift",
                          "reward_scale", "use_reward_scaling", "use_reward_norm")


def _check_step_estimators(config: PipelineConfig) -> list[ConfigIssue]:
    """ROLL's step-wise estimators (gigpo, step_reinforce, agentic_reinforce) score the turns of agentic
    trajectories: refused for RLVR runs; their knobs set where nothing reads them; what they do not read."""
    estimator, issues = config.adv_estimator, []
    for knob, readers in STEP_ESTIMATOR_KNOBS.items():
        if estimator not in readers and getattr(config, knob) != PipelineConfig.model_fields[knob].default:
            issues.append(_warning(knob, f"unused: adv_estimator {estimator} does not read it "
                                   f"(adv_estimator {' / '.join(readers)} does)"))
    if estimator not in AGENTIC_ADV_ESTIMATORS:
        return issues
    if config.train_env_manager is None:
        valid = [e for e in typing.get_args(PipelineConfig.model_fields["adv_estimator"].annotation)
                 if e not in AGENTIC_ADV_ESTIMATORS and e not in UNBUILT_ADV_ESTIMATORS]
        return [*issues, _error("adv_estimator", f"{estimator} gives each turn of a multi-turn trajectory its own "
                                "advantage: agentic runs only (set train_env_manager); for this RLVR run valid: "
                                f"{', '.join(valid)}")]
    if estimator == "gigpo" and config.episode_reward_weight == 0 and config.step_reward_weight == 0:
        issues.append(_error("step_reward_weight", "gigpo with episode_reward_weight 0 and step_reward_weight 0 "
                             "gives every turn the advantage 0; set either above 0"))
    if estimator == "agentic_reinforce":
        return issues
    norm = config.reward_normalization
    if norm is None or norm.method == "identity":
        what = "episode scores and step returns" if estimator == "gigpo" else "step returns"
        issues.append(_warning("reward_normalization.method" if norm is not None else "reward_normalization",
                               f"identity: {estimator} then uses the raw {what}, with no group baseline (ROLL's "
                               "GiGPO examples set grouping traj_group_id, i.e. state, and method mean)"))
    for knob in SCORE_PROCESSING_KNOBS:
        if getattr(config, knob) not in (None, False, "none"):
            issues.append(_warning(knob, f"has no effect with adv_estimator {estimator}: it processes the trajectory "
                                   "score, and this estimator scores each turn from its step rewards instead "
                                   "(reward_normalization normalises those)"))
    return issues


def _check_checkpointing(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    resume = config.resume_from_checkpoint
    if config.resume_mode == "path" and not isinstance(resume, str):
        issues.append(_error("resume_from_checkpoint", "resume_mode path needs resume_from_checkpoint set to a path"))
    if config.resume_mode == "none" and resume not in (False, None, ""):
        issues.append(_error("resume_mode", f"none contradicts resume_from_checkpoint {resume!r}"))
    if config.max_ckpts_to_keep == 0 or config.max_ckpts_to_keep < -1:
        issues.append(_error("max_ckpts_to_keep", "must be -1 (keep all) or a positive count"))
    return issues


ASYNC_KNOBS = ("max_staleness", "stale_samples", "stale_sample_decay", "off_policy_correction", "off_policy_cap")


def _check_async_rollout(config: PipelineConfig) -> list[ConfigIssue]:
    """rollout_mode and async_generation_ratio agree; the off-policy knobs can act (docs/decisions/0017)."""
    issues = []
    ratio, mode = config.async_generation_ratio, config.rollout_mode
    if ratio != int(ratio):
        issues.append(_error("async_generation_ratio", f"{ratio} is not a whole number of rollout batches "
                             "(ROLL, too, supports only integers)"))
    elif mode == "sync" and ratio > 0:
        issues.append(_error("async_generation_ratio", f"{ratio:g} contradicts rollout_mode sync; set 0, or leave "
                             "rollout_mode unset to follow the ratio"))
    elif mode == "one_step_off" and ratio > 1:
        issues.append(_error("async_generation_ratio", f"{ratio:g}: one_step_off runs exactly one batch ahead; "
                             "set 1 (or 0), or rollout_mode async for a longer lookahead"))
    elif mode == "async" and ratio < 1:
        issues.append(_error("async_generation_ratio", "rollout_mode async needs the lookahead: how many rollout "
                             "batches (>= 1) generation may run ahead of training"))
    if issues:
        return issues
    schedule = rollout_schedule(config)
    if not schedule.overlaps:
        return [_warning(name, "has no effect in sync rollout: every sample is generated by the policy it trains")
                for name in ASYNC_KNOBS if name in config.model_fields_set]
    if config.use_rollout_log_probs and config.off_policy_correction != "none":
        issues.append(_error("off_policy_correction", f"{config.off_policy_correction} weighs stale samples by "
                             "actor_train's recomputed log-probs over the engine's, but use_rollout_log_probs makes "
                             "the engine's the PPO ratio's old log-probs; set one of them off (none / false)"))
    if schedule.time_shared:
        issues.append(_warning("rollout_mode", f"{schedule.mode}: actor_infer shares its devices with actor_train, so "
                               "the roles take turns and generation cannot overlap training (samples are still up "
                               f"to {schedule.lookahead} version(s) old); give actor_infer its own device_mapping"))
    if schedule.max_staleness < schedule.lookahead and config.stale_samples == "drop":
        issues.append(_warning("max_staleness", f"{schedule.max_staleness} < the lookahead {schedule.lookahead}: "
                               "batches generated further ahead are discarded and regenerated (wasted generation); "
                               "raise max_staleness or set stale_samples downweight"))
    if config.stale_samples == "drop" and "stale_sample_decay" in config.model_fields_set:
        issues.append(_warning("stale_sample_decay", "has no effect with stale_samples drop"))
    return issues


# sampling knobs after which vLLM's log-probs are of another distribution than the trainer's (trainer.rollout.vllm)
TRUNCATING_KNOBS: dict[str, tuple[float, ...]] = {"top_p": (1.0,), "top_k": (-1, 0), "min_p": (0.0,),
                                                  "repetition_penalty": (1.0,)}


def _check_train_infer_correction(config: PipelineConfig) -> list[ConfigIssue]:
    """ROLL's train_infer_correction compares actor_train's recomputed old log-probs with the engine's
    (trainer.algorithms.train_infer); both must exist and differ only by numerics (docs/decisions/0040)."""
    correction, path = config.train_infer_correction, "train_infer_correction"
    issues = []
    weight = correction.is_weight
    if not weight.enabled:
        issues += [_warning(f"{path}.is_weight.{name}", "has no effect while is_weight.enabled is false")
                   for name in ("weight_type", "upper_bound") if name in weight.model_fields_set]
    for i, rule in enumerate(correction.filters):
        where = f"{path}.filters.{i}"
        if not rule.enabled and rule.model_fields_set - {"enabled"}:
            issues.append(_warning(f"{where}.enabled", "false: this filter is off and keeps every token"))
        elif rule.enabled and not (rule.ratio_enabled or rule.diff_enabled):
            issues.append(_warning(where, "enabled, but ratio_enabled and diff_enabled are false: it keeps every "
                                   "token; enable one of them"))
    if not correction.acts():
        return issues
    if config.use_rollout_log_probs:
        issues.append(_error(path, "needs two log-probs of each token, actor_train's recomputed old log-probs and "
                             "the rollout engine's; use_rollout_log_probs: true makes the engine's the old "
                             "log-probs (every ratio would be 1); set use_rollout_log_probs: false"))
    args = config.actor_infer.generating_args
    if strategy_name("actor_infer", config.actor_infer) == "vllm" and args is not None:
        truncating = [name for name, neutral in TRUNCATING_KNOBS.items() if getattr(args, name) not in neutral]
        if truncating:
            issues.append(_warning(path, f"actor_infer.generating_args {', '.join(truncating)}: vLLM reports the "
                                   "log-probs of the truncated / penalised distribution it sampled from, actor_train "
                                   "those of the full one, so every ratio also carries the log of the kept mass, "
                                   "not only the numerical mismatch"))
    return issues


QUERY_FILTER_ARGS = {"mean_filter": ("threshold_up", "threshold_down"), "std_filter": ("std_threshold",),
                     "no_filter": ()}


def _check_dynamic_sampling(config: PipelineConfig) -> list[ConfigIssue]:
    """Query filters, replacement prompts and the length knobs act in the sync RLVR loop
    (trainer.pipeline.dynamic_sampling); elsewhere they are refused or flagged."""
    issues = []
    filtering = []
    for name, reward in config.rewards.items():
        rule = reward.query_filter_config
        if rule is None:
            continue
        path = f"rewards.{name}.query_filter_config"
        unknown = sorted(set(rule.filter_args) - set(QUERY_FILTER_ARGS[rule.type]))
        if unknown:
            valid = ", ".join(QUERY_FILTER_ARGS[rule.type]) or "none"
            issues.append(_error(f"{path}.filter_args", f"{', '.join(unknown)}: not read by {rule.type} "
                                 f"(valid: {valid})"))
        if rule.type != "no_filter":
            filtering.append(name)
    if config.train_env_manager is not None:
        set_here = [f"rewards.{n}.query_filter_config" for n in filtering]
        set_here += [f"rewards.{n}.response_length_penalty_coef" for n, r in config.rewards.items()
                     if r.response_length_penalty_coef]
        set_here += ["is_use_additional_prompts"] * config.is_use_additional_prompts
        issues += [_warning(path, "has no effect in the agentic pipeline (RLVR only)") for path in set_here]
        return issues
    if not config.is_use_additional_prompts:
        return issues
    if not filtering:
        issues.append(_warning("is_use_additional_prompts", "has no effect: no rewards.<name>.query_filter_config "
                               "drops groups to replace (e.g. {type: std_filter, filter_args: {std_threshold: 0}})"))
    elif rollout_schedule(config).overlaps:
        issues.append(_error("is_use_additional_prompts", f"replacement prompts are drawn in sync rollout only; "
                             f"rollout_mode {config.rollout_mode or 'from async_generation_ratio'} generates ahead "
                             "(set rollout_mode: sync, or drop it: filtered groups then just leave the loss)"))
    elif config.max_additional_running_prompts == 0:
        issues.append(_warning("max_additional_running_prompts", "0: no replacement prompts are drawn; filtered "
                               "groups only leave the loss"))
    return issues


DOMAINS_PATH = "actor_train.data_args.domain_interleave_probs"


def _check_domains(config: PipelineConfig) -> list[ConfigIssue]:
    """domain_interleave_probs and dataset_filter act on actor_train's prompts in the RLVR pipeline
    (trainer.data.sampler.DomainInterleavedSampler, trainer.data.datasets.filter_rows). Whether each listed
    domain has prompts is checked when the data is loaded, before any worker starts."""
    issues = []
    agentic = config.train_env_manager is not None
    if agentic and config.dataset_filter.model_dump() != DatasetFilter().model_dump():
        issues.append(_warning("dataset_filter", "has no effect in the agentic pipeline (episodes come from "
                               "environments, not data rows)"))
    for role, worker in roles(config).items():
        if role != "actor_train" and worker.data_args is not None and worker.data_args.domain_interleave_probs:
            issues.append(_warning(f"{role}.data_args.domain_interleave_probs", "has no effect: only "
                                   "actor_train.data_args.domain_interleave_probs splits the training batches"))
    data = config.actor_train.data_args
    probs = data.domain_interleave_probs if data is not None else None
    if not probs:
        return issues
    if agentic:
        return [*issues, _warning(DOMAINS_PATH, "has no effect in the agentic pipeline (RLVR only)")]
    size = config.rollout_batch_size
    shares = domain_batch_sizes(probs, size)
    split = ", ".join(f"{d} {n}" for d, n in shares.items())
    rule = ("ROLL's rounding gives every domain but the last listed int(p x rollout_batch_size) prompts and the "
            "last the rest")
    empty = [d for d, n in shares.items() if n < 1]
    if empty:
        enough = next((b for b in range(size + 1, 100 * size + 100)
                       if all(n >= 1 for n in domain_batch_sizes(probs, b).values())), None)
        fix = f"raise rollout_batch_size to at least {enough}" if enough else "raise rollout_batch_size"
        issues.append(_error(DOMAINS_PATH, f"{', '.join(empty)} would get no prompt in a batch of rollout_batch_size "
                             f"{size} ({split}; {rule}): {fix}, or raise their probability"))
    elif any(abs(n - probs[d] * size) > 1e-9 for d, n in shares.items()):
        issues.append(_warning(DOMAINS_PATH, f"a batch of {size} prompts splits as {split}, not exactly in these "
                               f"proportions: {rule}"))
    refills = any(r.query_filter_config is not None and r.query_filter_config.type != "no_filter"
                  for r in config.rewards.values())
    if (config.is_use_additional_prompts and refills and not rollout_schedule(config).overlaps
            and config.max_additional_running_prompts > 0):
        issues.append(_error("is_use_additional_prompts", f"replacement prompts are not drawn per domain here (ROLL "
                             f"refills each domain's share from that domain): with {DOMAINS_PATH} they would "
                             "shift a batch's proportions; set is_use_additional_prompts: false (filtered groups "
                             "then just leave the loss)"))
    batch_level = [name for name in ("norm_mean_type", "norm_std_type")
                   if getattr(config, name) in ("batch", "running")]
    batch_level += ["whiten_advantages"] * config.whiten_advantages
    if len(probs) > 1 and batch_level:
        issues.append(_warning(DOMAINS_PATH, f"ROLL normalises each domain's rewards and advantages apart (batch "
                               f"and running statistics per domain); here the whole batch is normalised together "
                               f"({', '.join(batch_level)})"))
    return issues


def _check_suspicious(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    agentic = config.train_env_manager is not None  # its groups: trajectories from one start state
    n = config.train_env_manager.group_size if agentic else config.num_return_sequences_in_group
    gen = config.actor_infer.generating_args
    group_based = config.adv_estimator in GROUP_ESTIMATORS
    if group_based and n == 1:
        issues.append(
            _warning(
                "train_env_manager.group_size" if agentic else "num_return_sequences_in_group",
                f"{config.adv_estimator} compares responses within a group; with 1 response per "
                f"{'start state' if agentic else 'prompt'} every advantage is 0",
            )
        )
    if gen is not None and n > 1 and (gen.temperature == 0 or not gen.do_sample):
        issues.append(
            _warning(
                "actor_infer.generating_args.temperature",
                f"greedy decoding makes the {n} responses of a group identical (no learning signal)",
            )
        )
    if config.validation is not None and config.validation.strategy_args is not None:
        issues.append(_warning("validation.strategy_args", "has no effect: evaluation generates with actor_infer's "
                               "engine and weights (set actor_infer.strategy_args instead)"))
    if config.validation is not None and config.validation.data_args is None and config.eval_steps > 0 and not agentic:
        issues.append(_warning("validation.data_args", "no evaluation prompts: evaluation is skipped"))
    if config.val_greedy and config.val_n_sample > 1:
        issues.append(
            _warning("val_n_sample", f"val_greedy decodes the same response {config.val_n_sample} times per prompt")
        )
    if config.save_steps > config.max_steps:
        issues.append(
            _warning("save_steps", f"{config.save_steps} > max_steps {config.max_steps}: no intermediate checkpoint")
        )
    if config.eval_steps > config.max_steps:
        issues.append(_warning("eval_steps", f"{config.eval_steps} > max_steps {config.max_steps}: no evaluation"))
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is None:
            continue
        lr = worker.training_args.learning_rate
        model = (worker.model_args.model_name_or_path or config.pretrain or "").lower()
        if lr > 1e-3 and "tiny" not in model:
            issues.append(
                _warning(
                    f"{role}.training_args.learning_rate",
                    f"{lr} is very high for fine-tuning a pretrained model (typical: 1e-7 .. 1e-5)",
                )
            )
    if config.value_clip is not None and config.critic is None:
        issues.append(_warning("value_clip", "has no effect without a critic"))
    return issues


LORA_KNOBS = ("lora_rank", "lora_alpha", "lora_dropout", "additional_target", "autocast_adapter_dtype")


def _check_lora(config: PipelineConfig) -> list[ConfigIssue]:
    """LoRA is ROLL's: on when a training role's lora_target is set (trainer.models.lora). Its other knobs act only
    with it; actor_infer serves the policy actor_train trains (merged), so it may repeat actor_train's settings, as
    ROLL's examples do, but not differ; a knob at its default there says nothing (merged weights need no LoRA on
    actor_infer: a stored config lists every default); the reference is the frozen base model and takes none."""
    issues = []
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is None:
            continue
        args = worker.model_args
        if args.lora_target is None:
            issues += [_error(f"{role}.model_args.{knob}", "acts only with lora_target (ROLL trains LoRA adapters when "
                              f"lora_target is set, e.g. all or q_proj,v_proj); set it, or remove this: override ~{role}.model_args.{knob}")
                       for knob in LORA_KNOBS if getattr(args, knob) != type(args).model_fields[knob].default]
        elif not args.lora_target.strip(" ,"):
            issues.append(_error(f"{role}.model_args.lora_target", "names no module; give comma-separated module "
                                 "names (e.g. q_proj,v_proj), all, or a regex"))
    train_args, infer_args = config.actor_train.model_args, config.actor_infer.model_args
    for knob in ("lora_target", *LORA_KNOBS):
        if (knob in infer_args.model_fields_set and getattr(infer_args, knob) != getattr(train_args, knob)
                and getattr(infer_args, knob) != type(infer_args).model_fields[knob].default):
            issues.append(_error(f"actor_infer.model_args.{knob}", f"= {getattr(infer_args, knob)!r} differs from "
                                 f"actor_train's {getattr(train_args, knob)!r}: the engine serves the policy actor_train "
                                 "trains (LoRA merged into its weights); repeat actor_train's value or remove it: override "
                                 f"~actor_infer.model_args.{knob}"))
    if config.reference is not None and config.reference.model_args.lora_target is not None:
        issues.append(_warning("reference.model_args.lora_target", "no effect: the reference is the frozen base "
                               "model; LoRA adapters train on actor_train and critic"))
    return issues


def _check_adapters(config: PipelineConfig) -> list[ConfigIssue]:
    """model_args.adapter_name_or_path (trainer.models.adapters): every role that loads a model takes it; actor_infer
    serves actor_train's policy, so it may repeat actor_train's adapter but not name another; evaluation generates
    with actor_infer's engine and reward workers other than reward_model load no model, so theirs do nothing. The
    folder's contents (adapter_config.json, rank and alpha) are preflight's: only the cluster can read them.
    vllm's enable_lora serves actor_train's trained LoRA (trainer.rollout.vllm), which needs that LoRA, the base
    weights loaded, no modules_to_save (vLLM serves LoRA layers only) and a rank vLLM's slot holds."""
    issues = []
    for role, worker in roles(config).items():
        adapter = worker.model_args.adapter_name_or_path
        path = f"{role}.model_args.adapter_name_or_path"
        if adapter is not None and not adapter.strip():
            issues.append(_error(path, "is empty; give the folder of a trained LoRA adapter, or remove it"))
        elif adapter is not None and role == "validation":
            issues.append(_warning(path, "no effect: evaluation generates with actor_infer's engine, which serves "
                                   "actor_train's adapter"))
        elif adapter is not None and role.startswith("rewards.") and _reward_kind(worker) != "reward_model":
            issues.append(_warning(path, "no effect: only a reward_model reward loads its model_args adapter"))
    train, infer = config.actor_train.model_args, config.actor_infer.model_args
    if infer.adapter_name_or_path is not None and infer.adapter_name_or_path != train.adapter_name_or_path:
        issues.append(_error("actor_infer.model_args.adapter_name_or_path",
                             f"= {infer.adapter_name_or_path!r} differs from actor_train's {train.adapter_name_or_path!r}: "
                             "the engine serves the policy actor_train trains (it loads actor_train's adapter); "
                             "repeat actor_train's value or remove it"))
    options = strategy_config(config.actor_infer)
    if not isinstance(options, VllmConfig):
        return issues
    where = "actor_infer.strategy_args.strategy_config"
    if options.max_lora_rank is not None and not options.enable_lora:
        issues.append(_error(f"{where}.max_lora_rank", "acts only with enable_lora: true; set it, or remove this"))
    if not options.enable_lora:
        return issues
    if train.lora_target is None:
        issues.append(_error(f"{where}.enable_lora", "serves actor_train's LoRA adapter, but actor_train trains no "
                             "LoRA; set actor_train.model_args.lora_target, or remove enable_lora"))
        return issues
    if options.load_format == "dummy":
        issues.append(_error(f"{where}.load_format", "dummy leaves the base weights random, and with enable_lora only "
                             "the adapter is synced; use auto (or safetensors / pt)"))
    if train.additional_target is not None:
        issues.append(_error(f"{where}.enable_lora", f"vLLM serves LoRA layers only, not actor_train's "
                             f"additional_target {train.additional_target!r} (modules_to_save); remove one of them"))
    rank = train.lora_rank or 8  # ROLL's default (trainer.config.adapters)
    if options.max_lora_rank is not None and rank > options.max_lora_rank:
        issues.append(_error(f"{where}.max_lora_rank", f"{options.max_lora_rank} is below actor_train's lora_rank "
                             f"{rank}; set max_lora_rank >= {rank} or leave it unset"))
    elif rank > 512:
        issues.append(_error(f"{where}.enable_lora", f"actor_train's lora_rank {rank} is above vLLM's largest "
                             "servable rank 512; lower lora_rank or remove enable_lora"))
    return issues


def _reward_kind(worker: WorkerConfig) -> str | None:
    """A reward section's reward type, named by reward_type or by a known ROLL worker_cls."""
    return getattr(worker, "reward_type", None) or ROLL_REWARD_WORKERS.get(worker.worker_cls or "")


def _check_freezing(config: PipelineConfig) -> list[ConfigIssue]:
    """freeze_module_prefix (trainer.models.freezing) is ROLL's: it freezes a training role that trains all its
    weights; with lora_target ROLL ignores it (LoRA freezes the base already), and a forward-only role trains
    nothing. A role repeating actor_train's value (a shared YAML anchor) is not warned about."""
    issues = []
    policy = config.actor_train.model_args.freeze_module_prefix
    for role, worker in roles(config).items():
        prefix = worker.model_args.freeze_module_prefix
        path = f"{role}.model_args.freeze_module_prefix"
        if prefix is None:
            continue
        if any(not part.strip() for part in prefix.split(",")):
            issues.append(_error(path, f"{prefix!r} holds an empty prefix, which would freeze every parameter; give "
                                 "comma-separated parameter-name prefixes, e.g. model.embed_tokens,model.layers.0."))
        elif role not in TRAINING_ROLES:
            if prefix != policy:
                issues.append(_warning(path, "no effect: this role trains nothing (freezing acts on actor_train and "
                                       "critic)"))
        elif worker.model_args.lora_target is not None:
            issues.append(_warning(path, "no effect with lora_target: LoRA trains only the adapters and freezes the "
                                   "rest already (ROLL ignores freeze_module_prefix then)"))
    return issues


def _check_profiling(config: PipelineConfig) -> list[ConfigIssue]:
    """profiler_steps is a [first, last] range of steps; one profiling mode at a time (ROLL asserts it); a range
    that starts after the run's last step would profile nothing (trainer.roles.profiling)."""
    steps = config.profiler_steps
    if len(steps) != 2 or not 1 <= steps[0] <= steps[1]:
        return [_error("profiler_steps", f"{steps} is not a step range: write [first, last] with 1 <= first <= last "
                       "(e.g. [2, 2] for the second step only)")]
    if config.profiler_timeline and config.profiler_memory:
        return [_error("profiler_memory", "profiler_timeline and profiler_memory are both on; ROLL allows one "
                       "profiling mode at a time: turn one off")]
    if (config.profiler_timeline or config.profiler_memory) and steps[0] > config.max_steps:
        return [_error("profiler_steps", f"{steps} starts after the last step (max_steps {config.max_steps}): nothing "
                       f"would be profiled; e.g. [{config.max_steps}, {config.max_steps}]")]
    return []


def _check_inactive_fields(config: PipelineConfig) -> list[ConfigIssue]:
    """A warning for every field set to a value other than its default that the engine does not
    act on (schema.Inactive): accepted for import only, or reserved for an unbuilt backend. The
    strategy_config of an unbuilt strategy is skipped: its strategy_name is already an error."""
    issues: list[ConfigIssue] = []

    def walk(model: BaseModel, path: str) -> None:
        for name in sorted(model.model_fields_set):
            value = getattr(model, name)
            where = f"{path}.{name}" if path else name
            status, reason = field_status(type(model), name)
            if status != "acts":
                if not _is_default(type(model).model_fields[name], value):
                    issues.append(_warning(where, _inactive_message(status, reason)))
                continue
            if name == "strategy_args" and value is not None and value.strategy_name not in BUILT_STRATEGIES:
                continue
            for child, child_path in _sections_in(value, where):
                walk(child, child_path)

    walk(config, "")
    return issues


def _inactive_message(status: str, reason: str) -> str:
    if status == "planned":
        return f"has no effect: {reason}"
    return f"accepted for compatibility but has no effect here: {reason}"


def _is_default(info: Any, value: Any) -> bool:
    default = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and isinstance(default, BaseModel):
        return value.model_dump() == default.model_dump()
    return value == default


def _sections_in(value: Any, path: str) -> list[tuple[BaseModel, str]]:
    if isinstance(value, BaseModel):
        return [(value, path)]
    if isinstance(value, Mapping):
        return [(v, f"{path}.{k}") for k, v in value.items() if isinstance(v, BaseModel)]
    return []


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
