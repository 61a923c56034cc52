"""Training and forward-only strategies behind one protocol (docs/decisions/0001-module-contracts.md).

Training: `torch_train` (one process), `fsdp2_train` (FSDP2), `deepspeed_train` (DeepSpeed ZeRO) and
`megatron_train` (megatron-core TP × PP, CUDA only) over an initialised torch.distributed group.
Forward-only roles (reference): `hf_infer` / `torch_train` (the whole model), `fsdp2_infer`,
`deepspeed_infer` and `megatron_infer` (sharded), behind `ForwardStrategy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from torch import nn

from trainer.train.base import (
    ForwardStrategy,
    LossFn,
    OptimConfig,
    PlainForward,
    TrainStrategy,
    lr_multiplier,
)

if TYPE_CHECKING:
    from trainer.config.topology import TrainShape

STRATEGIES = ("torch_train", "fsdp2_train", "deepspeed_train", "megatron_train")
FORWARD_STRATEGIES = ("hf_infer", "torch_train", "fsdp2_infer", "deepspeed_infer", "megatron_infer")
# strategies whose ranks form one torch.distributed group (the worker groups set it up)
PROCESS_GROUP_STRATEGIES = frozenset({"fsdp2_train", "fsdp2_infer", "deepspeed_train", "deepspeed_infer",
                                      "megatron_train", "megatron_infer"})

__all__ = [
    "FORWARD_STRATEGIES",
    "PROCESS_GROUP_STRATEGIES",
    "STRATEGIES",
    "ForwardStrategy",
    "LossFn",
    "OptimConfig",
    "TrainStrategy",
    "build_forward_strategy",
    "build_strategy",
    "lr_multiplier",
]


def _as_mapping(strategy_config: Mapping[str, Any] | BaseModel | None) -> Mapping[str, Any] | None:
    """A strategy's options as the keys the config set: a typed section's, or a mapping as it is."""
    return strategy_config.model_dump(exclude_unset=True) if isinstance(strategy_config, BaseModel) else strategy_config


def build_strategy(
    name: str,
    model: nn.Module,
    optim: OptimConfig,
    *,
    rank: int = 0,
    world_size: int = 1,
    device: str = "cpu",
    strategy_config: Mapping[str, Any] | Any | None = None,
    shape: TrainShape | None = None,
) -> TrainStrategy:
    """Wrap `model` (same initial weights on every rank) in the named strategy.

    `strategy_config` is the role's `strategy_args.strategy_config` (torch_train: param_dtype; fsdp2_train: param_dtype,
    reduce_dtype, reshard_after_forward, cpu_offload, offload_pin_memory, fsdp_size; deepspeed_train:
    a DeepSpeed JSON, trainer.train.deepspeed_config; megatron_train: the schema's MegatronConfig keys,
    trainer.train.megatron_config): a mapping or the schema's pydantic model.
    `shape` is the role's TrainShape (deepspeed_train derives DeepSpeed's batch keys from it).
    """
    strategy_config = _as_mapping(strategy_config)
    if name == "torch_train":
        if world_size != 1:
            raise ValueError(f"torch_train is single-process; got world_size={world_size} (use fsdp2_train)")
        from trainer.train.torch_strategy import TorchStrategy

        return TorchStrategy(model, optim, device=device, strategy_config=dict(strategy_config or {}))
    if name == "fsdp2_train":
        from trainer.train.fsdp2_strategy import FSDP2Strategy

        return FSDP2Strategy(
            model, optim, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config
        )
    if name == "deepspeed_train":
        if shape is None:
            raise ValueError("deepspeed_train needs the role's TrainShape (trainer.config.topology.train_shape)")
        from trainer.train.deepspeed_strategy import DeepSpeedStrategy

        return DeepSpeedStrategy(
            model, optim, rank=rank, world_size=world_size, shape=shape, device=device, strategy_config=strategy_config
        )
    if name == "megatron_train":
        from trainer.train.megatron_config import require_cuda

        require_cuda(name)  # before importing megatron-core: the reason, not an import-time warning
        from trainer.train.megatron_strategy import MegatronStrategy

        return MegatronStrategy(
            model, optim, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config
        )
    raise ValueError(f"unknown training strategy {name!r}; valid: {', '.join(STRATEGIES)}")


def build_forward_strategy(
    name: str,
    model: nn.Module,
    *,
    rank: int = 0,
    world_size: int = 1,
    device: str = "cpu",
    strategy_config: Mapping[str, Any] | Any | None = None,
) -> ForwardStrategy:
    """A frozen `model` for a forward-only role. hf_infer / torch_train: the whole model on this
    rank (torch_train's param_dtype: fp32 weights, autocast in that dtype); fsdp2_infer (Fsdp2Config keys), deepspeed_infer (a DeepSpeed JSON; ZeRO-3 partitions the
    parameters) and megatron_infer (MegatronConfig keys; TP × PP, CUDA only): sharded over the
    initialised process group."""
    strategy_config = _as_mapping(strategy_config)
    if name == "hf_infer":
        if strategy_config:
            raise ValueError(f"strategy_config: hf_infer as a forward-only role takes no options, got {sorted(strategy_config)}")
        return PlainForward(model, device=device)
    if name == "torch_train":
        from trainer.train.torch_strategy import compute_dtype

        explicit = (strategy_config or {}).get("param_dtype") is not None
        dtype = compute_dtype(model, strategy_config)  # also refuses unknown keys
        return PlainForward(model, device=device, autocast_dtype=dtype if explicit else None)
    if name == "fsdp2_infer":
        from trainer.train.fsdp2_strategy import FSDP2Forward

        return FSDP2Forward(model, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config)
    if name == "deepspeed_infer":
        from trainer.train.deepspeed_strategy import DeepSpeedForward

        return DeepSpeedForward(model, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config)
    if name == "megatron_infer":
        from trainer.train.megatron_config import require_cuda

        require_cuda(name)
        from trainer.train.megatron_strategy import MegatronForward

        return MegatronForward(
            model, rank=rank, world_size=world_size, device=device, strategy_config=strategy_config
        )
    raise ValueError(f"unknown forward-only strategy {name!r}; valid: {', '.join(FORWARD_STRATEGIES)}")
