"""Training strategies behind one protocol (docs/decisions/0001-module-contracts.md).

`torch_train` (one process) and `fsdp2_train` (FSDP2 over an initialised torch.distributed group)
exist now; `deepspeed_train` and `megatron_train` join later behind the same `TrainStrategy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from trainer.train.base import LossFn, OptimConfig, TrainStrategy, lr_multiplier

STRATEGIES = ("torch_train", "fsdp2_train")
PLANNED_STRATEGIES = ("deepspeed_train", "megatron_train")

__all__ = ["STRATEGIES", "LossFn", "OptimConfig", "TrainStrategy", "build_strategy", "lr_multiplier"]


def build_strategy(
    name: str,
    model: nn.Module,
    optim: OptimConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    device: str = "cpu",
    strategy_config: Mapping[str, Any] | Any | None = None,
) -> TrainStrategy:
    """Wrap `model` (same initial weights on every rank) in the named strategy.

    `strategy_config` is the role's `strategy_args.strategy_config` (fsdp2_train: param_dtype,
    reduce_dtype, reshard_after_forward, cpu_offload, offload_pin_memory, fsdp_size): a mapping or
    the schema's pydantic model.
    """
    if hasattr(strategy_config, "model_dump"):
        strategy_config = strategy_config.model_dump()
    if name == "torch_train":
        if world_size != 1:
            raise ValueError(f"torch_train is single-process; got world_size={world_size} (use fsdp2_train)")
        if strategy_config:
            raise ValueError(f"strategy_config: torch_train takes no options, got {sorted(strategy_config)}")
        from trainer.train.torch_strategy import TorchStrategy

        return TorchStrategy(model, optim, device=device)
    if name == "fsdp2_train":
        from trainer.train.fsdp2_strategy import FSDP2Strategy

        return FSDP2Strategy(
            model, optim, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config
        )
    if name in PLANNED_STRATEGIES:
        raise NotImplementedError(f"strategy {name!r} is not implemented yet; available: {', '.join(STRATEGIES)}")
    raise ValueError(f"unknown training strategy {name!r}; valid: {', '.join(STRATEGIES)}")
