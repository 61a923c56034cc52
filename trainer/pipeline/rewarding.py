"""Scoring and reward/advantage processing glue between the config and trainer.algorithms.

The ``rewards`` section maps a domain name to a reward worker config; each sample goes to the
reward whose ``tag_included`` lists the sample's ``tag`` (an empty list takes every sample).
Without a ``rewards`` section a synthetic-task run is scored by the ``synthetic`` verifier.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor

from trainer.algorithms import rewards as reward_algos
from trainer.config.registries import ROLL_REWARD_WORKERS


def _reward_type(name: str, section: Any) -> str:
    if section.reward_type:
        return section.reward_type
    if section.worker_cls in ROLL_REWARD_WORKERS:
        return ROLL_REWARD_WORKERS[section.worker_cls]
    raise ValueError(f"rewards.{name}.reward_type: not set (and no known worker_cls); "
                     "valid: math_rule, synthetic, format, reward_model")


def build_reward_fn(cfg: Any) -> Any:
    """(prompts, responses, samples) -> list[float], dispatching each sample by its tag."""
    from trainer.rewards.registry import build_reward

    routes: list[tuple[str, list[str], Any]] = []
    for name, section in cfg.rewards.items():
        kwargs = dict(section.reward_kwargs)
        if _reward_type(name, section) == "reward_model":
            kwargs.setdefault("model_name_or_path", section.model_args.model_name_or_path or cfg.reward_pretrain)
        routes.append((name, list(section.tag_included), build_reward(_reward_type(name, section), **kwargs)))
    if not routes:
        data_args = cfg.actor_train.data_args
        if data_args is None or data_args.synthetic is None:
            raise ValueError("rewards: no reward configured; add e.g. "
                             "`rewards: {math_rule: {reward_type: math_rule}}`")
        routes.append(("synthetic", [], build_reward("synthetic")))

    def score(prompts: list[str], responses: list[str], samples: list[dict]) -> list[float]:
        out: list[float | None] = [None] * len(samples)
        for _name, tags, fn in routes:
            idx = [i for i, s in enumerate(samples) if out[i] is None and (not tags or s.get("tag") in tags)]
            if idx:
                scores = fn([prompts[i] for i in idx], [responses[i] for i in idx], [samples[i] for i in idx])
                for i, value in zip(idx, scores, strict=True):
                    out[i] = float(value)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            tag = samples[missing[0]].get("tag")
            raise ValueError(f"rewards: no reward takes samples with tag {tag!r} (tag_included of "
                             f"{', '.join(n for n, _, _ in routes)})")
        return [float(v) for v in out]  # type: ignore[arg-type]

    return score


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


def process_scores(cfg: Any, scores: Tensor, group_ids: Tensor,
                   state: RewardStats) -> tuple[Tensor, RewardStats, dict[str, float]]:
    """reward_clip, then mean/std normalisation as the config's norm knobs resolve."""
    clipped, clip_frac = reward_algos.clip_rewards(scores, cfg.reward_clip)
    mean_type, std_type = reward_algos.resolve_norm_types(
        cfg.norm_mean_type, cfg.norm_std_type, reward_shift=cfg.reward_shift, reward_scale=cfg.reward_scale,
        use_reward_scaling=cfg.use_reward_scaling, use_reward_norm=cfg.use_reward_norm,
    )
    normalized, running = reward_algos.normalize_rewards(
        clipped, norm_mean_type=mean_type, norm_std_type=std_type, group_ids=group_ids, running=state.moments()
    )
    new_state = RewardStats(asdict(running)) if running is not None else state
    metrics = {"reward/clip_frac": clip_frac, "reward/normalized_mean": float(normalized.mean())}
    return normalized, new_state, metrics


def process_token_rewards(cfg: Any, token_rewards: Tensor, mask: Tensor) -> Tensor:
    return reward_algos.whiten(token_rewards, mask) if cfg.whiten_rewards else token_rewards


def process_advantages(cfg: Any, advantages: Tensor, mask: Tensor) -> Tensor:
    if cfg.whiten_advantages:
        advantages = reward_algos.whiten(advantages, mask)
    advantages, _ = reward_algos.clip_advantages(advantages, mask, cfg.advantage_clip)
    return advantages
