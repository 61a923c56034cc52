"""Steps every importer shares after its rules ran: strategy clean-up, role defaults, unused keys."""

from __future__ import annotations

import copy
import typing
from typing import Any

from pydantic import BaseModel

from trainer.config.importers.rules import Translation, leaves, lookup, pop_path
from trainer.config.issues import ConfigIssue
from trainer.config.schema import STRATEGY_CONFIG_MODELS
from trainer.config.topology import WORKER_ROLES

# The same engine setting under another name in SGLang's config.
SGLANG_NAMES = {
    "tensor_parallel_size": "tp_size",
    "gpu_memory_utilization": "mem_fraction_static",
    "max_model_len": "context_length",
    "max_num_seqs": "max_running_requests",
}
ROLES = WORKER_ROLES  # the config's worker sections (trainer.config.topology.ROLE_TABLE)
# The same setting under each generation engine's name (vLLM's enforce_eager is SGLang's disable_cuda_graph).
ENGINE_NAMES: dict[str, dict[str, str]] = {
    "sglang": {**SGLANG_NAMES, "enforce_eager": "disable_cuda_graph"},
    "vllm": {theirs: ours for ours, theirs in {**SGLANG_NAMES, "enforce_eager": "disable_cuda_graph"}.items()},
}


# An engine this build lacks -> the built engine that runs the same role (same kind: generation).
REPLACEMENTS: dict[str, str] = {"sglang": "vllm"}


def other_engine_names(raw: dict[str, Any]) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """A ROLL file's strategy_config goes to its engine as written; a setting under the other engine's name (SGLang's
    mem_fraction_static once `strategy_name=vllm` replaces sglang) is read under this engine's name, with a warning."""
    issues: list[ConfigIssue] = []
    out = copy.deepcopy(raw)
    sections = [(k, v) for k, v in out.items() if isinstance(v, dict)]
    rewards = out.get("rewards")
    if isinstance(rewards, dict):  # anything else is the schema's to refuse, with its field path
        sections += [(f"rewards.{k}", v) for k, v in rewards.items() if isinstance(v, dict)]
    for role, section in sections:
        args = section.get("strategy_args")
        cfg = args.get("strategy_config") if isinstance(args, dict) else None
        names = ENGINE_NAMES.get(str(args.get("strategy_name"))) if isinstance(args, dict) else None
        if not isinstance(cfg, dict) or names is None:
            continue
        for key in [k for k in cfg if k in names and names[k] not in cfg]:
            cfg[names[key]] = cfg.pop(key)
            issues.append(ConfigIssue(f"{role}.strategy_args.strategy_config.{key}", f"read as {names[key]}: "
                                      f"{key} is the other engine's name for it ({role} runs {args['strategy_name']})",
                                      "warning"))
    return (out, issues) if issues else (raw, [])


def role_sections(t: Translation) -> dict[str, dict[str, Any]]:
    out = {role: t.native[role] for role in ROLES if isinstance(t.native.get(role), dict)}
    for name, section in (t.native.get("rewards") or {}).items():
        out[f"rewards.{name}"] = section
    return out


def settle_strategies(t: Translation) -> None:
    """Give each strategy_config only the settings its strategy has; report the others with their source.

    A foreign file may carry settings of several backends (FSDP and Megatron, vLLM and SGLang); only the
    chosen backend's apply."""
    for role, section in role_sections(t).items():
        args = section.get("strategy_args")
        if not isinstance(args, dict):
            continue
        name = args.get("strategy_name")
        cfg = args.get("strategy_config") or {}
        if name is None:
            if cfg:
                for key in list(cfg):
                    source = t.origin.get(f"{role}.strategy_args.strategy_config.{key}", role)
                    t.warn(source, f"not imported: no backend chosen for {role}")
            section.pop("strategy_args")
            continue
        model = STRATEGY_CONFIG_MODELS[name]
        if name == "sglang":
            for ours, theirs in SGLANG_NAMES.items():
                if ours in cfg and theirs not in cfg:
                    cfg[theirs] = cfg.pop(ours)
                    _move_origin(t, f"{role}.strategy_args.strategy_config", ours, theirs)
            if "enforce_eager" in cfg:
                cfg["disable_cuda_graph"] = cfg.pop("enforce_eager")
                _move_origin(t, f"{role}.strategy_args.strategy_config", "enforce_eager", "disable_cuda_graph")
        for key in list(cfg):
            if key not in model.model_fields:
                value = cfg.pop(key)
                source = t.origin.get(f"{role}.strategy_args.strategy_config.{key}")
                if source is None or t.written(source):  # a release default of the other backend: nothing chosen
                    t.warn(source or f"{role}.{key}", f"= {value!r} not imported: applies only to another backend; "
                           f"{role} runs {name}, which has no {key} setting")
        args["strategy_config"] = cfg


def _move_origin(t: Translation, base: str, old: str, new: str) -> None:
    if f"{base}.{old}" in t.origin:
        t.origin[f"{base}.{new}"] = t.origin.pop(f"{base}.{old}")


def fill_model_paths(t: Translation, roles: tuple[str, ...]) -> None:
    """Roles without their own model load the policy model (`pretrain`), as `${pretrain}` would."""
    pretrain = t.native.get("pretrain")
    for role in roles:
        if pretrain is None or role not in t.native:
            continue
        found, _ = lookup(t.native, f"{role}.model_args.model_name_or_path")
        if not found:
            t.native[role].setdefault("model_args", {})["model_name_or_path"] = pretrain


def drop_unused_reference(t: Translation) -> None:
    """The reference model only exists when some KL term needs it (as in verl and SkyRL)."""
    uses_kl = t.native.get("use_kl_loss") or t.native.get("add_token_level_kl")
    if uses_kl or "reference" not in t.native:
        return
    pop_path(t.native, "reference")
    # a key that also set another role's value (verl's model section) was imported, only not here
    acted_elsewhere = {source for path, source in t.origin.items() if not path.startswith("reference.")}
    for path, source in list(t.origin.items()):
        if path.startswith("reference."):
            if t.written(source) and source not in acted_elsewhere:
                t.warn(source, "not imported: no KL term is enabled, so no reference model is created")
            t.origin.pop(path)


def import_save_interval(t: Translation, source: str) -> None:
    """A checkpoint interval of the source (-1 = never) as save_steps: a positive interval as is;
    "never" as max_steps (only the final checkpoint) when max_steps is known, else reported."""
    interval = t.int(source) if t.has(source) else None
    if interval is None:
        return
    if interval > 0:
        t.set("save_steps", int(interval), source)
    elif "max_steps" in t.native:
        t.set("save_steps", t.native["max_steps"], source)
    else:
        t.warn(source, "-1 (never) has no native form: checkpoints are written every save_steps and at the end; "
               "set save_steps = max_steps for only the final one")


def import_lora(t: Translation, section: str, *, rank: str, alpha: str, targets: str, dropout: str | None = None,
                alpha_default: int = 16, targets_default: str = "all-linear") -> None:
    """LoRA alpha, target modules (and dropout) under `section` (its rank is a plain rule): mapped when rank > 0,
    alpha and targets at the source's defaults when the file leaves them out (LoRA here is ROLL's: it turns on
    with lora_target, and an unset alpha would be 2 × rank); else each one written is reported as not imported.
    Target modules may be a list or a comma-separated string."""
    keys = (alpha, targets) if dropout is None else (alpha, targets, dropout)
    if (t.get(f"{section}.{rank}") or 0) <= 0:
        for key in keys:
            if t.written(f"{section}.{key}"):
                t.warn(f"{section}.{key}", f"= {t.get(f'{section}.{key}')!r} not imported: used only when {rank} > 0")
        return
    t.set("actor_train.model_args.lora_alpha", t.int(f"{section}.{alpha}", alpha_default), f"{section}.{alpha}")
    target = t.get(f"{section}.{targets}", targets_default)
    text = ",".join(str(x) for x in target) if isinstance(target, list) else str(target)
    t.set("actor_train.model_args.lora_target", text, f"{section}.{targets}")
    if dropout is not None and t.has(f"{section}.{dropout}"):
        t.set("actor_train.model_args.lora_dropout", t.float(f"{section}.{dropout}"), f"{section}.{dropout}")


MISMATCH = "train_infer_correction"  # the native section of ROLL's train-infer correction (docs/decisions/0040)


def mismatch_weight(level: str, upper_bound: float) -> dict[str, Any]:
    """A native train_infer_correction.is_weight: w = clamp(rho, 0, upper_bound), rho = pi_old / mu read at `level`
    (token; sequence = exp of the sample's summed log-ratio; geometric = exp of its mean), multiplying each token's
    policy-gradient term: verl's and SkyRL's truncated IS weight min(rho, threshold) (rho > 0)."""
    return {"enabled": True, "weight_type": level, "upper_bound": upper_bound}


def mismatch_filter(level: str, low: float, high: float) -> dict[str, Any]:
    """A native train_infer_correction filter: tokens (or whole samples, at a sample level) with rho outside the
    inclusive band [low, high] leave the actor's loss: verl's rejection sampling and SkyRL's sequence masks."""
    return {"enabled": True, "agg_type": level, "ratio_enabled": True, "ratio_low": low, "ratio_high": high,
            "diff_enabled": False}


def positive_number(t: Translation, path: str, default: float | None = None) -> float | None:
    """The source's number at `path` (or `default` when unset), which must be > 0; an error naming the key and the
    override that removes it otherwise (None)."""
    value = t.get(path, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        t.error(path, f"= {value!r} must be a number > 0 (a ratio threshold); to run this file without it, use the "
                f"override ~{path}")
        return None
    return float(value)


def enable_vllm_lora(t: Translation, source: str, *, megatron: bool) -> None:
    """verl and SkyRL start vLLM with enable_lora (max_loras 1, max_lora_rank the policy's rank, verl rounding it up
    to vLLM's sizes) whenever the policy trains a LoRA outside Megatron, and after each update sync the adapter
    only: the native enable_lora (decision 0042). The engine then loads the base weights from the model path: with
    verl's dummy load format verl pushes the same base weights at its first sync, so it becomes auto."""
    if (t.get(source) or 0) <= 0 or megatron or "lora_target" not in t.native.get("actor_train", {}).get(
            "model_args", {}):
        return
    args = t.native.get("actor_infer", {}).get("strategy_args", {})
    if args.get("strategy_name") != "vllm":
        return
    t.set("actor_infer.strategy_args.strategy_config.enable_lora", True, source)
    options = args.setdefault("strategy_config", {})
    if options.get("load_format") == "dummy":
        options["load_format"] = "auto"


def positive_interval(value: Any) -> Any:
    """verl/SkyRL/RLinf write -1 for "never"; the native eval_steps treats <= 0 as disabled too."""
    return value if value > 0 else -1


def fit_to_model(t: Translation, value: Any, model: Any, source: str) -> Any:
    """Keep the keys of a nested mapping that `model` (a config section) knows; report the others."""
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = model.model_fields.get(key)
        if field is None:
            t.warn(f"{source}.{key}", f"= {item!r} not imported: no such setting in the native "
                   f"{model.__name__} (known: {', '.join(model.model_fields)})")
            continue
        sub = next((m for m in _section_models(field.annotation)), None)
        out[key] = fit_to_model(t, item, sub, f"{source}.{key}") if sub is not None else item
    return out


def _section_models(annotation: Any) -> list[Any]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _section_models(arg)]


def warn_unused(t: Translation, prefix: str, why: str) -> None:
    """Report every set key under `prefix` of the source file as not imported, and forget what it set."""
    found, node = lookup(t.given, prefix)
    if not found or node is None:
        return
    items = leaves(node, {}, f"{prefix}.") if isinstance(node, dict) else iter([(prefix, node)])
    for path, value in items:
        if value is not None and value != {} and t.written(path) and path.rpartition(".")[2] != "_target_":
            t.warn(path, f"= {value!r} not imported: {why}")
    for path, source in list(t.origin.items()):
        if source == prefix or source.startswith(f"{prefix}."):
            t.origin.pop(path)
            pop_path(t.native, path)  # e.g. verl's critic.cliprange_value set value_clip
