"""The native experiment config: pydantic v2 models in ROLL's layout (torch-free).

This module is the single source of truth's entry point: `PipelineConfig`, the whole experiment, assembled from
the knob families in `trainer/config/sections/` (one module per family: each owns its section models and its
flat top-level keys; decision 0052). Every field's type, default, description and form category lives there.
Forms, REST validation, JSON Schema, docs/config.md, the importers and the trainer all read it. A ROLL config
file loads unchanged; settings from verl, SkyRL and RLinf that ROLL lacks have a home too, so the importers never
drop a value.

The YAML stays flat: the families' top-level keys are mixins of `PipelineConfig`. Pydantic orders fields by the
reversed MRO, so the bases are listed last family first; the field order (the editor's, the JSON Schema's,
docs/config.md's) is the order of `FAMILIES_IN_FIELD_ORDER` (tests/trainer/config/test_config_split_identity.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from trainer.config.sections.agentic import AgenticKnobs, CustomEnvConfig, EnvManagerConfig
from trainer.config.sections.base import (
    AGENTIC_ADV_ESTIMATORS,
    STEP_MAX,
    UNBUILT_ADV_ESTIMATORS,
    PathAccess,
    Section,
    field_status,
)
from trainer.config.sections.data import DataArgs, DatasetFilter, template_error
from trainer.config.sections.health import HealthConfig, WatchdogConfig
from trainer.config.sections.loss import AlgorithmKnobs, KLKnobs, LossKnobs
from trainer.config.sections.model import ModelArgs, TrainingArgs
from trainer.config.sections.rewards import RewardProcessingKnobs
from trainer.config.sections.roles import RewardWorkerConfig, WorkerConfig, WorkerRoles
from trainer.config.sections.roll_compat import RollMainKnobs
from trainer.config.sections.rollout import AsyncRolloutKnobs, BatchKnobs, GenerationSchedulingKnobs
from trainer.config.sections.run import ClusterKnobs, ExperimentKnobs, ScheduleKnobs
from trainer.config.sections.strategies import (
    STRATEGY_ARGS_MODELS,
    STRATEGY_CONFIG_MODELS,
    DeepSpeedConfig,
    Fsdp2Config,
    MegatronConfig,
    OffloadConfig,
    PrecisionToggle,
    SglangConfig,
    VllmConfig,
    ZeroOptimization,
)

# the names other modules import from here (re-exported; new code may import from the section module)
__all__ = [
    "AGENTIC_ADV_ESTIMATORS", "FAMILIES_IN_FIELD_ORDER", "STEP_MAX", "STRATEGY_ARGS_MODELS",
    "STRATEGY_CONFIG_MODELS", "UNBUILT_ADV_ESTIMATORS", "CustomEnvConfig", "DataArgs", "DatasetFilter",
    "DeepSpeedConfig", "EnvManagerConfig", "Fsdp2Config", "HealthConfig", "MegatronConfig", "ModelArgs",
    "OffloadConfig", "PathAccess", "PipelineConfig", "PrecisionToggle", "RewardWorkerConfig", "SglangConfig",
    "TrainingArgs", "VllmConfig", "WatchdogConfig", "WorkerConfig", "ZeroOptimization", "field_status",
    "template_error",
]

# The flat top-level keys, family by family, in the order a config file, the editor and docs/config.md show them.
FAMILIES_IN_FIELD_ORDER: tuple[type[Section], ...] = (
    ExperimentKnobs, ClusterKnobs, ScheduleKnobs, BatchKnobs, GenerationSchedulingKnobs, AsyncRolloutKnobs,
    AlgorithmKnobs, KLKnobs, LossKnobs, RewardProcessingKnobs, WorkerRoles, AgenticKnobs, RollMainKnobs,
)


class PipelineConfig(  # bases in reverse: pydantic puts the last base's fields first
    RollMainKnobs, AgenticKnobs, WorkerRoles, RewardProcessingKnobs, LossKnobs, KLKnobs, AlgorithmKnobs,
    AsyncRolloutKnobs, GenerationSchedulingKnobs, BatchKnobs, ScheduleKnobs, ClusterKnobs, ExperimentKnobs,
):
    """The whole experiment: pipeline keys at the top, one section per worker role."""

    def clip_range(self) -> tuple[float, float]:
        """(low, high) of the PPO ratio clip: pg_clip_low / pg_clip_high, each else pg_clip."""
        low = self.pg_clip_low if self.pg_clip_low is not None else self.pg_clip
        high = self.pg_clip_high if self.pg_clip_high is not None else self.pg_clip
        return low, high

    @model_validator(mode="before")
    @classmethod
    def _rollout_only_when_no_trainer(cls, data: Any) -> Any:
        """An agentic file (train_env_manager) with no actor_train section runs ROLL's AgenticRolloutPipeline
        (decision 0062): pipeline_mode rollout_only, the one place that sign is read."""
        if (isinstance(data, dict) and data.get("train_env_manager") is not None and "actor_train" not in data
                and "pipeline_mode" not in data):
            return {**data, "pipeline_mode": "rollout_only"}
        return data

    @model_validator(mode="after")
    def _apply_roll_shorthands(self) -> PipelineConfig:
        # ROLL: roles without a model path use pretrain (critic and reward models: reward_pretrain).
        for worker in (self.actor_train, self.actor_infer, self.reference):
            if worker is not None and worker.model_args.model_name_or_path is None:
                worker.model_args.model_name_or_path = self.pretrain
        for judged in (self.critic, self.reward_model):
            if judged is not None and judged.model_args.model_name_or_path is None:
                judged.model_args.model_name_or_path = self.reward_pretrain
        # global_template: the chat template of every role whose data_args leave template unset.
        if self.global_template is not None:
            for worker in (self.actor_train, self.validation):
                if worker is not None and worker.data_args is not None and "template" not in worker.data_args.model_fields_set:
                    worker.data_args.template = self.global_template
        # ROLL main's spellings of max_ckpts_to_keep, sft_loss_coef and GSPO.
        if self.max_ckpt_to_keep > 0 and "max_ckpts_to_keep" not in self.model_fields_set:
            self.max_ckpts_to_keep = self.max_ckpt_to_keep
        if self.postive_loss_coef > 0 and "sft_loss_coef" not in self.model_fields_set:
            self.sft_loss_coef = self.postive_loss_coef
        if self.importance_sampling == "seq" and "policy_loss" not in self.model_fields_set:
            self.policy_loss = "gspo"
        # reward_norm is ROLL's older spelling of both norm types.
        if self.reward_norm is not None:
            if self.norm_mean_type is None:
                self.norm_mean_type = self.reward_norm
            if self.norm_std_type is None:
                self.norm_std_type = self.reward_norm
        return self

