"""`fsdp2_train`: data-parallel training with FSDP2 (`torch.distributed.fsdp.fully_shard`).

Every rank holds a shard of each parameter (a DTensor over a 1-D data-parallel mesh); blocks are
all-gathered just in time for forward/backward and gradients are reduce-scattered back to shards.
The caller has already initialised torch.distributed (gloo on CPU, nccl on GPU) and built the
same initial weights on every rank.

Checkpoint layout in `path`: `dcp/` (sharded model + optimizer, torch.distributed.checkpoint),
`scheduler.pt` (identical on all ranks, written by rank 0), `rng_rank<r>.pt` (one per rank).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from trainer.checkpoint.core import load_rank_rng, save_rank_rng
from trainer.config.schema import Fsdp2Config
from trainer.train.base import (
    DataParallel,
    OptimConfig,
    StrategyBase,
    TrainStrategyBase,
    require_process_group,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# strategy_config takes the keys of the schema's Fsdp2Config: a native YAML written by `trainer import` sets
# them all, and those this strategy does not read are planned or import-only (validation says so when one is
# set) or acted on by the schema itself (offload_policy turns cpu_offload on)
STRATEGY_CONFIG_KEYS = tuple(Fsdp2Config.model_fields)


class FSDP2Strategy(TrainStrategyBase):
    name = "fsdp2_train"

    def __init__(
        self,
        model: nn.Module,
        optim: OptimConfig,
        *,
        rank: int,
        world_size: int,
        device: str = "cpu",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        require_process_group("fsdp2_train", rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.data_parallel = DataParallel(rank, world_size)
        self.device = torch.device(device)
        model = shard_model(model, self.device, world_size, parse_strategy_config(strategy_config or {}))
        # The loss arrives divided by the GLOBAL normaliser (e.g. all tokens on all ranks), so the
        # true gradient is the SUM of the ranks' gradients. FSDP2 averages (divides by the DP size)
        # by default; factor 1 turns that into a plain sum, and forcing SUM collectives keeps it
        # portable (gloo has no AVG/PREMUL_SUM reduce-scatter).
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        self.model = model
        self.init_optimizer(optim)

    def full_state_dict(self) -> dict[str, Tensor]:
        """Unsharded CPU tensors on rank 0; `{}` on the other ranks. Collective: call on all ranks."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return cast(dict[str, Tensor], get_model_state_dict(self.model, options=options))

    def save_checkpoint(self, path: Path) -> None:
        """Collective: call on all ranks with the same (shared-filesystem) path."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=path / "dcp")
        if self.rank == 0:
            torch.save(self.scheduler.state_dict(), path / "scheduler.pt")
        save_rank_rng(path, self.rank)
        dist.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Collective. The world size must equal the one that saved (RNG files are per rank)."""
        path = Path(path)
        load_rank_rng(path, self.rank, self.world_size)  # first: a missing file names a world-size change
        # get_state_dict initialises the lazy AdamW state, so dcp.load has tensors to load into.
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
        dcp.load(state, checkpoint_id=path / "dcp")
        set_state_dict(
            self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        self.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))


class FSDP2Forward(StrategyBase):
    """`fsdp2_infer`: a frozen model sharded like fsdp2_train (each rank keeps 1/world of the weights,
    blocks all-gathered just in time), for forward passes only. Every rank must run the same number
    of forwards (they are collectives)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        rank: int,
        world_size: int,
        device: str = "cpu",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        require_process_group("fsdp2_infer", rank, world_size)
        model.eval().requires_grad_(False)
        options = parse_strategy_config(strategy_config or {})
        self.device = torch.device(device)
        self.model = shard_model(model, self.device, world_size, options)

    def full_state_dict(self) -> dict[str, Tensor]:
        """Unsharded CPU tensors on rank 0; `{}` on the other ranks. Collective."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return cast(dict[str, Tensor], get_model_state_dict(self.model, options=options))


def shard_model(model: nn.Module, device: torch.device, world_size: int, options: dict[str, Any]) -> nn.Module:
    """fully_shard each transformer block, then the root (parse_strategy_config's options)."""
    shard_kwargs: dict[str, Any] = {
        "mesh": device_mesh(device.type, world_size, options["fsdp_size"]),
        "mp_policy": options["mp_policy"],
        "offload_policy": options["offload_policy"],
    }
    model = model.to(device)
    for block in transformer_blocks(model):
        fully_shard(block, reshard_after_forward=options["reshard_after_forward"], **shard_kwargs)
    fully_shard(model, **shard_kwargs)
    return model


def parse_strategy_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Read `strategy_config` (the keys of the schema's Fsdp2Config).

    param_dtype / reduce_dtype (fp32 | bf16 | fp16) turn on FSDP2 mixed precision (fp32 master
    weights and optimizer state); reshard_after_forward: true frees gathered blocks after forward,
    false keeps them (ZeRO-2 like), an int reshards to that group size; cpu_offload keeps sharded
    parameters, gradients and optimizer state in CPU memory; fsdp_size (-1: all ranks) shards one
    model copy over that many ranks and replicates it across the rest (HSDP).
    """
    unknown = sorted(set(config) - set(STRATEGY_CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"strategy_config: unknown key(s) {unknown} for fsdp2_train; valid: {', '.join(STRATEGY_CONFIG_KEYS)}"
        )
    dtypes: dict[str, torch.dtype | None] = {}
    for key in ("param_dtype", "reduce_dtype"):
        value = config.get(key)
        if value is not None and value not in DTYPES:
            raise ValueError(f"strategy_config.{key}={value!r} is not valid; use one of {', '.join(DTYPES)}")
        dtypes[key] = DTYPES[value] if value is not None else None
    offload = CPUOffloadPolicy(pin_memory=bool(config.get("offload_pin_memory", False)))
    return {
        "mp_policy": MixedPrecisionPolicy(param_dtype=dtypes["param_dtype"], reduce_dtype=dtypes["reduce_dtype"]),
        "offload_policy": offload if config.get("cpu_offload", False) else OffloadPolicy(),
        "reshard_after_forward": config.get("reshard_after_forward", True),
        "fsdp_size": int(config.get("fsdp_size", -1)),
    }


def device_mesh(device_type: str, world_size: int, fsdp_size: int) -> DeviceMesh:
    """1-D mesh sharding over all ranks, or (replicate, shard) for HSDP when 0 < fsdp_size < world."""
    if fsdp_size <= 0 or fsdp_size == world_size:
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp_shard",))
    if world_size % fsdp_size:
        raise ValueError(
            f"strategy_config.fsdp_size={fsdp_size} must divide the role's world size {world_size} (or be -1)"
        )
    return init_device_mesh(
        device_type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("dp_replicate", "dp_shard")
    )


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks to shard one by one: the classes a Hugging Face model lists in
    `_no_split_modules` (e.g. Qwen2DecoderLayer), else the members of every nn.ModuleList."""
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    if block_names:
        return [m for m in model.modules() if type(m).__name__ in block_names]
    return [block for m in model.modules() if isinstance(m, nn.ModuleList) for block in m]

