"""What this build cannot run: checked after the rules (a coherent config may still name a backend
that does not exist yet)."""

from __future__ import annotations

import typing

from trainer.config.checks.common import NOT_BUILT
from trainer.config.checks.loss import PG_VARIANTS_BUILT
from trainer.config.checks.models import lora_target_names
from trainer.config.issues import ConfigIssue
from trainer.config.registries import (
    BUILT_STRATEGIES,
    ROLE_STRATEGIES,
    ROLL_REWARD_WORKERS,
    ROLL_UNSUPPORTED_REWARD_WORKERS,
)
from trainer.config.schema import (
    UNBUILT_ADV_ESTIMATORS,
    Fsdp2Config,
    MegatronConfig,
    PipelineConfig,
    WorkerConfig,
)
from trainer.config.topology import TRAINING_ROLES, roles, strategy_config, strategy_name


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
    server = config.reward_model
    if server is not None and strategy_name("reward_model", server) not in ("hf_infer", "vllm"):
        issues.append(ConfigIssue("reward_model.strategy_args.strategy_name", f"a judge group on "
                                  f"{strategy_name('reward_model', server)} {NOT_BUILT}; valid: hf_infer, vllm: override "
                                  "reward_model.strategy_args.strategy_name=vllm", kind="not_built"))
    variant = config.actor_train.pg_variant
    if variant is not None and variant not in PG_VARIANTS_BUILT:
        issues.append(ConfigIssue("actor_train.pg_variant", f"{variant!r} {NOT_BUILT}; valid: "
                                  f"{', '.join(PG_VARIANTS_BUILT)}", kind="not_built"))
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        issues += megatron_lora_unbuilt(role, worker)
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


MLP_PROJECTIONS = frozenset(("gate_proj", "up_proj", "down_proj"))  # in a mixture-of-experts layer: the experts'


def megatron_lora_unbuilt(role: str, worker: WorkerConfig | None) -> list[ConfigIssue]:
    """LoRA on megatron_train (trainer.train.megatron_lora, decision 0054) adapts actor_train's attention and dense
    MLP projections; a critic's adapters, experts (a strategy_config with expert / moe keys names a mixture-of-experts
    model, whose gate/up/down_proj are the experts') and additional_target (Hugging Face names) are not built there."""
    if worker is None or worker.model_args.lora_target is None or strategy_name(role, worker) != "megatron_train":
        return []
    if role == "critic":
        return [ConfigIssue(f"{role}.model_args.lora_target", f"LoRA on a megatron_train critic {NOT_BUILT}; train "
                            "its adapters with torch_train, fsdp2_train or deepspeed_train, or train the full critic: "
                            f"override ~{role}.model_args.lora_target", kind="not_built")]
    issues = []
    cfg = strategy_config(worker)
    # experts sharded (expert_*_size > 1) or a moe_ knob set; expert_model_parallel_size: 1 is dense ROLL files' default
    moe = isinstance(cfg, MegatronConfig) and any(
        k.startswith("moe_") or (k.startswith("expert_") and getattr(cfg, k) not in (None, 1))
        for k in cfg.model_fields_set)
    names = lora_target_names(worker.model_args.lora_target)
    if moe and (isinstance(names, str) or names & MLP_PROJECTIONS):
        issues.append(ConfigIssue(f"{role}.model_args.lora_target", f"{worker.model_args.lora_target!r} would adapt "
                                  "the experts of this mixture-of-experts model (its strategy_config sets expert / moe "
                                  f"keys); LoRA on megatron experts {NOT_BUILT}: adapt the attention only: override "
                                  f"{role}.model_args.lora_target=q_proj,k_proj,v_proj,o_proj", kind="not_built"))
    if worker.model_args.additional_target is not None:
        issues.append(ConfigIssue(f"{role}.model_args.additional_target", f"additional_target on megatron_train "
                                  f"{NOT_BUILT} (it names Hugging Face modules; megatron-core's differ); use "
                                  f"torch_train, fsdp2_train or deepspeed_train: override "
                                  f"~{role}.model_args.additional_target", kind="not_built"))
    return issues
