"""Reward processing knobs (flat top-level keys) and the normalisation of agentic trajectory scores."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from trainer.config.sections.base import NormType, Section, fld


class RewardNormalization(Section):
    grouping: Literal["state", "batch", "inductive"] = fld(
        "state", category="Agentic",
        description="Which trajectories are normalised together: same start state, whole batch, or by tag. "
        "ROLL main's traj_group_id (one env group's trajectories, which share the start state) reads as state, "
        "its tags (the env tag column ROLL groups by) as inductive.",
    )
    method: Literal["asym_clip", "identity", "mean_std", "mean"] = fld(
        "identity", category="Agentic",
        description="Normalisation inside a group: none, minus the mean, standardised, or standardised and "
        "clipped to [-1, 3] (docs/algorithms.md). ROLL main's older name for a (norm_mean_type, norm_std_type) "
        "pair: identity (unset, unset), mean (group, unset), mean_std and asym_clip (group, group); it fills "
        "only the types left unset.",
    )
    norm_mean_type: Literal["batch", "group"] | None = fld(
        None, category="Agentic",
        description="Mean subtracted from each trajectory score: its group's (group) or the whole batch's (batch); "
        "unset: the one method names (ROLL main's agentic reward normalisation).",
    )
    norm_std_type: Literal["batch", "group"] | None = fld(
        None, category="Agentic",
        description="Std each centred score is divided by: its group's (group) or the whole batch's (batch), a "
        "group of one or a std of 0 giving 0; unset: the one method names.",
    )

    @field_validator("grouping", mode="before")
    @classmethod
    def _roll_main_grouping(cls, value: Any) -> Any:
        return {"traj_group_id": "state", "tags": "inductive"}.get(value, value) if isinstance(value, str) else value


class RewardProcessingKnobs(Section):
    """Reward processing: clipping, whitening, normalisation."""

    reward_clip: float | None = fld(None, category="Reward processing", gt=0, description="Clip rewards to [-c, c].")
    advantage_clip: float | None = fld(
        None, category="Reward processing", gt=0, description="Clip advantages to [-c, c]."
    )
    whiten_rewards: bool = fld(False, category="Reward processing", description="Zero-mean, unit-variance rewards.")
    whiten_advantages: bool = fld(False, category="Reward processing", description="Zero-mean, unit-variance advantages.")
    use_reward_scaling: bool = fld(False, category="Reward processing", description="Scale rewards by a running std.")
    use_reward_norm: bool = fld(
        False, category="Reward processing", description="Normalise rewards (with use_reward_scaling)."
    )
    add_len_reward: bool = fld(
        False, category="Reward processing",
        description="Add 1 - response tokens / response_length (in [0, 1], more for shorter responses) to each score.",
    )
    reward_norm: NormType | None = fld(
        None, category="Reward processing", acts_through="norm_mean_type, norm_std_type",
        description="Older ROLL name that sets both norm_mean_type and norm_std_type.",
    )
    norm_mean_type: NormType | None = fld(
        None, category="Reward processing",
        description="Mean subtracted from rewards: over the batch, the prompt's group, running stats, or none.",
    )
    norm_std_type: NormType | None = fld(
        None, category="Reward processing", description="Std rewards are divided by (same choices as norm_mean_type)."
    )
    reward_shift: bool = fld(False, category="Reward processing", description="Normalise by subtracting the mean only.")
    reward_scale: bool = fld(False, category="Reward processing", description="Normalise by dividing by the std only.")
    reward_normalization: RewardNormalization | None = fld(
        None, category="Agentic", description="Normalisation of agentic trajectory scores (unset: none)."
    )

    @field_validator("reward_norm", mode="before")
    @classmethod
    def _python_none(cls, value: Any) -> Any:
        """`reward_norm: None` (Python's None as a YAML string, ROLL's docs example) is unset: ROLL main drops the key."""
        return None if value == "None" else value
