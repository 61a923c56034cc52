"""reward: scores responses with the reward functions named in the config's `rewards` section.

The `rewards` section maps a domain name to a reward worker config; each sample goes to the
reward whose `tag_included` lists the sample's `tag` (an empty list takes every sample).
Without a `rewards` section a synthetic-task run is scored by the `synthetic` verifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.config.registries import REWARD_TYPES, ROLL_REWARD_WORKERS
from trainer.roles.common import RoleBase

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


class RewardWorker(RoleBase):
    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        self.reward_fn = build_reward_fn(cfg)

    def score(self, batch: dict[str, Any]) -> list[float]:
        return self.reward_fn(list(batch["prompts"]), list(batch["responses"]), list(batch["samples"]))


def reward_type(name: str, section: Any) -> str:
    if section.reward_type:
        return section.reward_type
    if section.worker_cls in ROLL_REWARD_WORKERS:
        return ROLL_REWARD_WORKERS[section.worker_cls]
    raise ValueError(f"rewards.{name}.reward_type: not set (and no known worker_cls); "
                     f"valid: {', '.join(REWARD_TYPES)}")


def build_reward_fn(cfg: PipelineConfig) -> Any:
    """(prompts, responses, samples) -> list[float], dispatching each sample by its tag."""
    from trainer.rewards.registry import build_reward

    routes: list[tuple[str, list[str], Any]] = []
    for name, section in cfg.rewards.items():
        kwargs = dict(section.reward_kwargs)
        if reward_type(name, section) == "reward_model":
            kwargs.setdefault("model_name_or_path", section.model_args.model_name_or_path or cfg.reward_pretrain)
        if reward_type(name, section) == "code_sandbox":
            kwargs.update(use_local=section.use_local, code_url=section.code_url)
        try:
            fn = build_reward(reward_type(name, section), **kwargs)
        except ValueError as exc:
            raise ValueError(f"rewards.{name}.{exc}") from None
        routes.append((name, list(section.tag_included), fn))
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
