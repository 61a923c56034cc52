"""LoRA, adapters and frozen parameters."""

from __future__ import annotations

from trainer.config.adapters import REGEX_CHARS
from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.registries import ROLL_REWARD_WORKERS
from trainer.config.schema import PipelineConfig, VllmConfig, WorkerConfig
from trainer.config.topology import TRAINING_ROLES, roles, strategy_config

# what PEFT's all-linear adapts in a Qwen / Llama decoder (every linear layer but the output head)
DENSE_LINEAR = frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
LORA_KNOBS = ("lora_rank", "lora_alpha", "lora_dropout", "additional_target", "autocast_adapter_dtype")


def check_lora(config: PipelineConfig) -> list[ConfigIssue]:
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
            issues += [error(f"{role}.model_args.{knob}", "acts only with lora_target (ROLL trains LoRA adapters when "
                             f"lora_target is set, e.g. all or q_proj,v_proj); set it, or remove this: override ~{role}.model_args.{knob}")
                       for knob in LORA_KNOBS if getattr(args, knob) != type(args).model_fields[knob].default]
        elif not args.lora_target.strip(" ,"):
            issues.append(error(f"{role}.model_args.lora_target", "names no module; give comma-separated module "
                                "names (e.g. q_proj,v_proj), all, or a regex"))
    train_args, infer_args = config.actor_train.model_args, config.actor_infer.model_args
    served = _lora_served(config)
    for knob in ("lora_target", *LORA_KNOBS):
        ours, theirs = getattr(infer_args, knob), getattr(train_args, knob)
        if (knob not in infer_args.model_fields_set or ours == type(infer_args).model_fields[knob].default
                or (knob == "lora_target" and same_lora_target(ours, theirs)) or ours == theirs):
            continue
        path, differs = f"actor_infer.model_args.{knob}", f"= {ours!r} differs from actor_train's {theirs!r}"
        if served:
            issues.append(error(path, f"{differs}: the engine serves the adapter actor_train trains (enable_lora); "
                                f"repeat actor_train's value or remove it: override ~{path}"))
        else:
            issues.append(warning(path, f"{differs}, and has no effect: the engine serves the policy actor_train trains "
                                  "with its LoRA merged into the weights; actor_train's value is the one that acts"))
    if config.reference is not None and config.reference.model_args.lora_target is not None:
        issues.append(warning("reference.model_args.lora_target", "no effect: the reference is the frozen base "
                              "model; LoRA adapters train on actor_train and critic"))
    return issues


def check_adapters(config: PipelineConfig) -> list[ConfigIssue]:
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
            issues.append(error(path, "is empty; give the folder of a trained LoRA adapter, or remove it"))
        elif adapter is not None and role == "validation":
            issues.append(warning(path, "no effect: evaluation generates with actor_infer's engine, which serves "
                                  "actor_train's adapter"))
        elif adapter is not None and role.startswith("rewards.") and _reward_kind(worker) != "reward_model":
            issues.append(warning(path, "no effect: only a reward_model reward loads its model_args adapter"))
    train, infer = config.actor_train.model_args, config.actor_infer.model_args
    if infer.adapter_name_or_path is not None and infer.adapter_name_or_path != train.adapter_name_or_path:
        issues.append(error("actor_infer.model_args.adapter_name_or_path",
                            f"= {infer.adapter_name_or_path!r} differs from actor_train's {train.adapter_name_or_path!r}: "
                            "the engine serves the policy actor_train trains (it loads actor_train's adapter); "
                            "repeat actor_train's value or remove it"))
    options = strategy_config(config.actor_infer)
    if not isinstance(options, VllmConfig):
        return issues
    where = "actor_infer.strategy_args.strategy_config"
    if options.max_lora_rank is not None and not options.enable_lora:
        issues.append(error(f"{where}.max_lora_rank", "acts only with enable_lora: true; set it, or remove this"))
    if not options.enable_lora:
        return issues
    if train.lora_target is None:
        issues.append(error(f"{where}.enable_lora", "serves actor_train's LoRA adapter, but actor_train trains no "
                            "LoRA; set actor_train.model_args.lora_target, or remove enable_lora"))
        return issues
    if options.load_format == "dummy":
        issues.append(error(f"{where}.load_format", "dummy leaves the base weights random, and with enable_lora only "
                            "the adapter is synced; use auto (or safetensors / pt)"))
    if train.additional_target is not None:
        issues.append(error(f"{where}.enable_lora", f"vLLM serves LoRA layers only, not actor_train's "
                            f"additional_target {train.additional_target!r} (modules_to_save); remove one of them"))
    rank = train.lora_rank or 8  # ROLL's default (trainer.config.adapters)
    if options.max_lora_rank is not None and rank > options.max_lora_rank:
        issues.append(error(f"{where}.max_lora_rank", f"{options.max_lora_rank} is below actor_train's lora_rank "
                            f"{rank}; set max_lora_rank >= {rank} or leave it unset"))
    elif rank > 512:
        issues.append(error(f"{where}.enable_lora", f"actor_train's lora_rank {rank} is above vLLM's largest "
                            "servable rank 512; lower lora_rank or remove enable_lora"))
    return issues


def _reward_kind(worker: WorkerConfig) -> str | None:
    """A reward section's reward type, named by reward_type or by a known ROLL worker_cls."""
    return getattr(worker, "reward_type", None) or ROLL_REWARD_WORKERS.get(worker.worker_cls or "")


def check_freezing(config: PipelineConfig) -> list[ConfigIssue]:
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
            issues.append(error(path, f"{prefix!r} holds an empty prefix, which would freeze every parameter; give "
                                "comma-separated parameter-name prefixes, e.g. model.embed_tokens,model.layers.0."))
        elif role not in TRAINING_ROLES:
            if prefix != policy:
                issues.append(warning(path, "no effect: this role trains nothing (freezing acts on actor_train and "
                                      "critic)"))
        elif worker.model_args.lora_target is not None:
            issues.append(warning(path, "no effect with lora_target: LoRA trains only the adapters and freezes the "
                                  "rest already (ROLL ignores freeze_module_prefix then)"))
    return issues


def lora_target_names(target: str) -> frozenset[str] | str:
    """lora_target as the set of module names it adapts in a Qwen / Llama-style model (all / all-linear: the seven
    projections), or the text itself where it is a regex (trainer.config.adapters.REGEX_CHARS)."""
    if any(c in target for c in REGEX_CHARS):
        return target
    names = frozenset(name.strip() for name in target.split(",") if name.strip())
    return DENSE_LINEAR if names in ({"all"}, {"all-linear"}) else names


def same_lora_target(a: str | None, b: str | None) -> bool:
    """Whether two lora_target values adapt the same modules of a Qwen / Llama-style model."""
    return a == b or (a is not None and b is not None and lora_target_names(a) == lora_target_names(b))


def _lora_served(config: PipelineConfig) -> bool:
    """vllm's enable_lora serves actor_train's adapter itself (trainer.roles.common.lora_served)."""
    options = strategy_config(config.actor_infer)
    return isinstance(options, VllmConfig) and options.enable_lora
