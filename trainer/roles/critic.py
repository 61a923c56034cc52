"""critic: a value head on the policy's backbone, trained with the clipped value loss (GAE / PPO)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from torch import Tensor, nn

from trainer.algorithms import policy_loss as pl
from trainer.models.value import ValueModel, response_values
from trainer.roles.actor import LossSpec, TrainedRole
from trainer.roles.common import (
    build_train_strategy,
    forward_in_chunks,
    load_role_model,
    micro_batching,
    role_section,
    seed_training_role,
)
from trainer.roles.profiling import profiled
from trainer.train.ppo_update import Normalisers

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


class CriticWorker(TrainedRole):
    role_prefix = "critic"

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        seed_training_role(cfg, role, rank, offset=17)
        model = ValueModel(load_role_model(cfg, role, training=True))
        self.strategy = build_train_strategy(cfg, role, model, rank, world_size)
        self.loss_spec = LossSpec.from_config(cfg)

    @profiled
    def compute_values(self, batch: dict[str, Tensor]) -> Tensor:
        return forward_in_chunks(response_values, self.strategy, batch, role_section(self.cfg, self.role).infer_batch_size,
                                 micro_batching(self.cfg, self.role, "infer"))

    @profiled
    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        return self.update(batch, step, partial(critic_loss, self.loss_spec))


def critic_loss(spec: LossSpec, model: nn.Module, mb: dict[str, Tensor], *,
                norm: Normalisers) -> tuple[Tensor, dict[str, float]]:
    """The clipped value loss (value_clip) of the predicted values against the returns, over the global
    normalisers `norm` (ppo_update's)."""
    values = response_values(model, mb)
    out = pl.value_loss(values, mb["values"], mb["returns"], mb["response_mask"],
                        value_clip=spec.value_clip, agg=spec.loss_agg(norm))
    metrics = dict(out.metrics)
    metrics["vf_loss"] *= norm.metric_scale
    return out.loss, metrics
