"""Knobs that look like a mistake, and inactive fields a config sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from trainer.config.checks.agentic import proxy_tags
from trainer.config.checks.common import warning
from trainer.config.issues import ConfigIssue
from trainer.config.registries import BUILT_STRATEGIES
from trainer.config.schema import CustomEnvConfig, PipelineConfig, field_status
from trainer.config.topology import TRAINING_ROLES, lengths

GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")
# custom env fields only ROLL's ProxyEnvManager reads (its agent runner): acting where it plays the env, else
# import-only (the templates carry no schema marker: the engine reads them)
PROXY_RUNNER_FIELDS = ("agent_runner_cls", "agent_system_template", "agent_template")


def check_suspicious(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    agentic = config.train_env_manager is not None  # its groups: trajectories from one start state
    n = config.train_env_manager.group_size if agentic else config.num_return_sequences_in_group
    gen = config.actor_infer.generating_args
    group_based = config.adv_estimator in GROUP_ESTIMATORS
    if group_based and n == 1:
        issues.append(
            warning(
                "train_env_manager.group_size" if agentic else "num_return_sequences_in_group",
                f"{config.adv_estimator} compares responses within a group; with 1 response per "
                f"{'start state' if agentic else 'prompt'} every advantage is 0",
            )
        )
    if gen is not None and n > 1 and (gen.temperature == 0 or not gen.do_sample):
        issues.append(
            warning(
                "actor_infer.generating_args.temperature",
                f"greedy decoding makes the {n} responses of a group identical (no learning signal)",
            )
        )
    if config.validation is not None and config.validation.strategy_args is not None:
        issues.append(warning("validation.strategy_args", "has no effect: evaluation generates with actor_infer's "
                              "engine and weights (set actor_infer.strategy_args instead)"))
    if config.validation is not None and config.validation.data_args is None and config.eval_steps > 0 and not agentic:
        issues.append(warning("validation.data_args", "no evaluation prompts: evaluation is skipped"))
    if config.val_greedy and config.val_n_sample > 1:
        issues.append(
            warning("val_n_sample", f"val_greedy decodes the same response {config.val_n_sample} times per prompt")
        )
    if config.save_steps > config.max_steps:
        issues.append(
            warning("save_steps", f"{config.save_steps} > max_steps {config.max_steps}: no intermediate checkpoint")
        )
    if config.eval_steps > config.max_steps:
        issues.append(warning("eval_steps", f"{config.eval_steps} > max_steps {config.max_steps}: no evaluation"))
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is None:
            continue
        lr = worker.training_args.learning_rate
        model = (worker.model_args.model_name_or_path or config.pretrain or "").lower()
        if lr > 1e-3 and "tiny" not in model:
            issues.append(
                warning(
                    f"{role}.training_args.learning_rate",
                    f"{lr} is very high for fine-tuning a pretrained model (typical: 1e-7 .. 1e-5)",
                )
            )
    if config.value_clip is not None and config.critic is None:
        issues.append(warning("value_clip", "has no effect without a critic"))
    return issues


def check_inactive_fields(config: PipelineConfig) -> list[ConfigIssue]:
    """A warning for every field set to a value other than its default that the engine does not
    act on (schema.Inactive): accepted for import only, or reserved for an unbuilt backend. The
    strategy_config of an unbuilt strategy is skipped: its strategy_name is already an error."""
    issues: list[ConfigIssue] = []
    proxied = {f"custom_envs.{tag}" for tag in proxy_tags(config)}

    def walk(model: BaseModel, path: str) -> None:
        for name in sorted(model.model_fields_set):
            value = getattr(model, name)
            where = f"{path}.{name}" if path else name
            status, reason = field_status(type(model), name)
            if where == "sequence_length" and lengths(config).trajectory_cap is None:  # acts only as ROLL's cap
                status, reason = "import_only", ("prompt_length + response_length bound every sequence (it caps a "
                                                 "whole trajectory only in an agentic run that leaves both unset)")
            if isinstance(model, CustomEnvConfig) and name in PROXY_RUNNER_FIELDS:
                # GEMRunner reads them (trainer.envs.agent_runner); no other manager does
                status, reason = ("acts", None) if path in proxied else \
                    ("import_only", "prompts come from env_instruction and the chat template")
            if status != "acts":
                if not _is_default(type(model).model_fields[name], value):
                    issues.append(warning(where, _inactive_message(status, reason)))
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
