"""reference: the frozen initial policy, log-probs for the KL penalty / KL loss. hf_infer (the
default) and torch_train hold the whole model; fsdp2_infer, deepspeed_infer and megatron_infer shard
it over the role's ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from trainer.config import topology
from trainer.roles.common import (
    RoleBase,
    device,
    forward_in_chunks,
    load_role_model,
    logprobs_fn,
    micro_batching,
    role_section,
    sampling_temperature,
    strategy_options,
)
from trainer.roles.profiling import profiled
from trainer.train import build_forward_strategy

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


class ReferenceWorker(RoleBase):
    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = role_section(cfg, role)
        self.strategy = build_forward_strategy(topology.strategy_name(role, section), load_role_model(cfg, role),
                                               rank=rank, world_size=world_size, device=device(),
                                               strategy_config=strategy_options(section))
        self.temperature = sampling_temperature(cfg)

    @profiled
    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        chunk = role_section(self.cfg, self.role).infer_batch_size
        return forward_in_chunks(logprobs_fn(self.temperature), self.strategy, batch, chunk,
                                 micro_batching(self.cfg, self.role, "infer"))
