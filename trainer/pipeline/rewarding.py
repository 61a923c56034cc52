"""Reward and advantage processing between the config and trainer.algorithms: what the loop does
with the scores the reward role returns (trainer.roles.reward routes samples to reward functions)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trainer.algorithms import rewards as reward_algos
from trainer.algorithms import sample_filters

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


@dataclass(frozen=True)
class RewardSpec:
    """The reward-processing and sample-mask knobs, and nothing else of the config: what the functions below
    read (the narrow view of the `PipelineConfig`, like `LossSpec` for the losses). `generation_limit` is the
    longest response generation allows (actor_infer's max_new_tokens, else response_length)."""

    response_length: int = 1024
    add_len_reward: bool = False
    reward_clip: float | None = None
    norm_mean_type: str | None = None
    norm_std_type: str | None = None
    reward_shift: bool = False
    reward_scale: bool = False
    use_reward_scaling: bool = False
    use_reward_norm: bool = False
    whiten_rewards: bool = False
    whiten_advantages: bool = False
    advantage_clip: float | None = None
    max_len_mask: bool = False
    generation_limit: int = 1024
    error_max_len_clip: bool = False
    error_max_len_threshold: int = 9999999999
    difficulty_mask: bool = False
    difficulty_low_threshold: float = 0.0
    difficulty_high_threshold: float = 1.0
    difficulty_loss_weight: bool = False
    length_loss_weight: bool = False

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> RewardSpec:
        args = cfg.actor_infer.generating_args
        return cls(
            response_length=cfg.response_length, add_len_reward=cfg.add_len_reward, reward_clip=cfg.reward_clip,
            norm_mean_type=cfg.norm_mean_type, norm_std_type=cfg.norm_std_type, reward_shift=cfg.reward_shift,
            reward_scale=cfg.reward_scale, use_reward_scaling=cfg.use_reward_scaling,
            use_reward_norm=cfg.use_reward_norm, whiten_rewards=cfg.whiten_rewards,
            whiten_advantages=cfg.whiten_advantages, advantage_clip=cfg.advantage_clip,
            max_len_mask=cfg.max_len_mask,
            generation_limit=(args.max_new_tokens if args is not None else None) or cfg.response_length,
            error_max_len_clip=cfg.error_max_len_clip, error_max_len_threshold=cfg.error_max_len_threshold,
            difficulty_mask=cfg.difficulty_mask, difficulty_low_threshold=cfg.difficulty_low_threshold,
            difficulty_high_threshold=cfg.difficulty_high_threshold,
            difficulty_loss_weight=cfg.difficulty_loss_weight, length_loss_weight=cfg.length_loss_weight,
        )


@dataclass
class RewardStats:
    """Running reward moments carried across steps (and checkpoints) for `running` normalisation."""

    running: dict[str, float] = field(default_factory=dict)

    def moments(self) -> reward_algos.RunningMoments | None:
        return reward_algos.RunningMoments(**self.running) if self.running else None

    def state_dict(self) -> dict[str, Any]:
        return dict(self.running)

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RewardStats:
        return cls(dict(state))


def process_scores(spec: RewardSpec, scores: Tensor, group_ids: Tensor, state: RewardStats,
                   response_lengths: Tensor, length_terms: Tensor | None = None,
                   ) -> tuple[Tensor, RewardStats, dict[str, float]]:
    """The per-domain `response_length_penalty_coef` term (r + coef·ρ(len), dynamic_sampling.length_reward_terms),
    `add_len_reward` (r + 1 − len/response_length), then reward_clip, then mean/std normalisation as the
    config's norm knobs resolve."""
    if length_terms is not None:
        scores = scores + length_terms
    if spec.add_len_reward:
        scores = reward_algos.add_length_reward(scores, response_lengths, spec.response_length)
    clipped, clip_frac = reward_algos.clip_rewards(scores, spec.reward_clip)
    mean_type, std_type = reward_algos.resolve_norm_types(
        spec.norm_mean_type, spec.norm_std_type, reward_shift=spec.reward_shift, reward_scale=spec.reward_scale,
        use_reward_scaling=spec.use_reward_scaling, use_reward_norm=spec.use_reward_norm,
    )
    normalized, running = reward_algos.normalize_rewards(
        clipped, norm_mean_type=mean_type, norm_std_type=std_type, group_ids=group_ids, running=state.moments()
    )
    new_state = RewardStats(asdict(running)) if running is not None else state
    metrics = {"reward/clip_frac": clip_frac, "reward/normalized_mean": float(normalized.mean())}
    return normalized, new_state, metrics


def process_token_rewards(spec: RewardSpec, token_rewards: Tensor, mask: Tensor) -> Tensor:
    return reward_algos.whiten(token_rewards, mask) if spec.whiten_rewards else token_rewards


def process_advantages(spec: RewardSpec, advantages: Tensor, mask: Tensor) -> Tensor:
    if spec.whiten_advantages:
        advantages = reward_algos.whiten(advantages, mask)
    advantages, _ = reward_algos.clip_advantages(advantages, mask, spec.advantage_clip)
    return advantages


def sample_mask(spec: RewardSpec, scores: Tensor, group_ids: Tensor, response_lengths: Tensor | None = None,
                query_filter: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """Samples the actor's loss keeps → (bool [batch], metrics), ROLL's `get_sample_level_mask`.

    `max_len_mask`: drop responses as long as the generation limit (max_new_tokens, else
    response_length). `difficulty_mask`: keep sample i iff difficulty_low_threshold < mean score of its
    prompt's group < difficulty_high_threshold (raw scores, before any reward processing).
    `error_max_len_clip`: drop wrong answers of error_max_len_threshold tokens or more.
    `query_filter` [batch]: the groups that pass their reward's query filter (dynamic_sampling). As ROLL
    does, a step whose every sample would be dropped by these masks keeps them all rather than step on
    nothing. That fallback never re-admits a group the query filter dropped: in ROLL the filter acts in the
    generation scheduler, so such a group never reaches the batch the masks see. When no group passes the
    filter, no sample is kept and the actor does not step (trainer.pipeline.learner.Learner.learn).
    """
    keep = torch.ones(scores.shape[0], dtype=torch.bool)
    passing = torch.ones_like(keep) if query_filter is None else query_filter.to(torch.bool)
    metrics: dict[str, float] = {}
    if spec.max_len_mask or spec.error_max_len_clip:
        if response_lengths is None:
            raise ValueError("max_len_mask / error_max_len_clip need the response lengths")
        if spec.max_len_mask:
            kept = sample_filters.max_len_keep(response_lengths, spec.generation_limit)
            metrics["actor/max_len_mask_ratio"] = float(kept.float().mean())
            keep &= kept
        if spec.error_max_len_clip:
            kept = sample_filters.error_length_keep(scores, response_lengths, spec.error_max_len_threshold)
            metrics["actor/error_len_mask_ratio"] = float(kept.float().mean())
            keep &= kept
    if query_filter is not None:
        metrics["actor/query_filter_mask_ratio"] = float(passing.float().mean())
    if spec.difficulty_mask:
        kept = reward_algos.difficulty_mask(scores, group_ids, spec.difficulty_low_threshold,
                                            spec.difficulty_high_threshold)
        metrics["actor/difficulty_mask_ratio"] = float(kept.float().mean())
        keep &= kept
    if not bool((keep & passing).any()):
        keep = torch.ones_like(keep)
    keep &= passing
    metrics["actor/final_mask_ratio"] = float(keep.float().mean())
    return keep, metrics


def sample_weights(spec: RewardSpec, response_mask: Tensor, difficulty: Tensor | None) -> Tensor | None:
    """Per-sample weights of the policy loss [batch] (None when neither knob is set), ROLL's
    `compute_sample_weights`: `difficulty_loss_weight` (0.5 + 1.5·difficulty, from the data's
    `difficulty` column) times `length_loss_weight` (1.5 − min-max-normalised length), rescaled to
    mean 1. Taken over the whole rollout batch (ROLL: over each micro-batch), so the weights do not
    depend on how the batch is split across ranks and micro-batches."""
    if not (spec.difficulty_loss_weight or spec.length_loss_weight):
        return None
    by_difficulty = None
    if spec.difficulty_loss_weight:
        if difficulty is None:
            raise ValueError("difficulty_loss_weight: the training samples carry no `difficulty` value")
        by_difficulty = reward_algos.difficulty_loss_weights(difficulty)
    by_length = reward_algos.length_loss_weights(response_mask) if spec.length_loss_weight else None
    return reward_algos.sample_loss_weights(response_mask.shape[0], difficulty_weights=by_difficulty,
                                            length_weights=by_length)
