"""Which strategy may run each role, and DeepSpeed's owned and forward-only keys."""

from __future__ import annotations

from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.presets import owned_key_conflicts
from trainer.config.registries import ROLE_STRATEGIES
from trainer.config.schema import DeepSpeedConfig, PipelineConfig
from trainer.config.topology import TRAINING_ROLES, roles, strategy_config, strategy_name, train_shape


def check_strategies(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        name = strategy_name(kind, worker)
        allowed = ROLE_STRATEGIES[kind]
        if name not in allowed:
            issues.append(
                error(
                    f"{role}.strategy_args.strategy_name",
                    f"{name} cannot run {kind}; choose one of {', '.join(allowed)}",
                )
            )
        if worker.worker_cls is not None and kind != "rewards":
            issues.append(warning(f"{role}.worker_cls", "ignored: the trainer picks the worker for this role"))
    return issues


def check_deepspeed_forward_only(config: PipelineConfig) -> list[ConfigIssue]:
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
            issues.append(warning(f"{role}.strategy_args.strategy_config",
                                  f"forward-only role: no effect from {', '.join(ignored)}"))
    return issues


def check_deepspeed_owned_keys(config: PipelineConfig) -> list[ConfigIssue]:
    """DeepSpeed's batch keys and gradient_clipping are derived (presets.owned_key_conflicts): a
    strategy_config may write auto or the same value, never another one."""
    issues = []
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        cfg = strategy_config(worker) if worker is not None else None
        if isinstance(cfg, DeepSpeedConfig):
            conflicts = owned_key_conflicts(cfg, train_shape(config, role), worker.training_args.max_grad_norm)
            issues.extend(error(f"{role}.strategy_args.strategy_config.{key}", why) for key, why in conflicts.items())
    return issues
