"""`deepspeed_train` (actor_train, critic) and `deepspeed_infer` (forward-only roles) on DeepSpeed ZeRO.

The caller has initialised torch.distributed (gloo on CPU, nccl on GPU) and built the same initial
weights on every rank; DeepSpeed joins that process group. ZeRO stage 1 partitions optimizer state,
2 also gradients, 3 also parameters (gathered module by module for forward/backward).

Gradient semantics: the loss arrives divided by the GLOBAL normaliser (all tokens on all ranks), so
the true gradient is the SUM of the ranks' gradients. DeepSpeed averages (divides the reduced
gradients by the data-parallel size, in every ZeRO stage), so each rank back-propagates
`loss × world_size`: average(world_size · g_r) = Σ_r g_r. DeepSpeed's own 1/gradient_accumulation_steps
loss scaling is turned off (`scale_wrt_gas=False`): the micro-batch losses already sum to the objective.

The LR follows trainer.train.base.lr_multiplier, written by base.write_lr before each step (not a
DeepSpeed scheduler, which would not advance on a skipped step as ours does).

Compiled ops (CPU Adam for optimizer offload, the CPU communication op) are built on first use into
TORCH_EXTENSIONS_DIR, by default ~/.cache/policylab/torch_extensions, reused by later runs.

Checkpoint layout in `path`: `ds/` (DeepSpeed's model + ZeRO-partitioned optimizer state, one file
per rank), `rng_rank<r>.pt` (one per rank).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from trainer.checkpoint.core import load_rank_rng, save_rank_rng
from trainer.config.topology import TrainShape
from trainer.train.base import (
    DataParallel,
    LossFn,
    OptimConfig,
    StrategyBase,
    accumulate_gradients,
    build_optimizer,
    clip_grad_norm,
    require_process_group,
    require_same_micro_batch_count,
    step_unless_non_finite,
    trainable_parameters,
    write_lr,
)
from trainer.train.deepspeed_config import (
    build_ds_config,
    offloads_optimizer,
    parse_strategy_config,
    resolve_precision,
)

DEFAULT_EXTENSIONS_DIR = Path.home() / ".cache" / "policylab" / "torch_extensions"
CHECKPOINT_TAG = "ds"
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(DEFAULT_EXTENSIONS_DIR))

import deepspeed  # noqa: E402  (after TORCH_EXTENSIONS_DIR: DeepSpeed reads it when it builds an op)

logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
logger = logging.getLogger(__name__)
# DeepSpeed 0.19 calls collectives torch 2.13 has renamed: one FutureWarning per call floods the logs
warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)


# A build of one op takes about a minute here; a `lock` older than this was left by a killed build
STALE_BUILD_LOCK_S = 900.0


def clear_stale_build_locks(root: Path, older_than_s: float = STALE_BUILD_LOCK_S) -> list[Path]:
    """Remove the `lock` files of op builds that died: torch's build lock (cpp_extension's FileBaton) is a
    file whose creator deletes it when the build ends, and every later load polls for it to go away — forever,
    silently, after a build was killed (Ctrl-C in scripts/setup.sh, a timeout). A lock older than
    `older_than_s` cannot belong to a live build. Returns the removed paths."""
    removed = []
    now = time.time()
    for lock in root.glob("*/lock"):
        try:
            if now - lock.stat().st_mtime > older_than_s:
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:  # its build ended meanwhile
            continue
    for lock in removed:
        logger.warning("removed a stale DeepSpeed op build lock (a killed build left it): %s", lock)
    return removed


def build_ops() -> list[str]:
    """Compile (or load from TORCH_EXTENSIONS_DIR) the C++ ops deepspeed_train uses here: CPU Adam
    (optimizer offload) and, on the CPU accelerator, DeepSpeed's shared-memory communication op.
    scripts/setup.sh calls it once, so tests and runs do not wait for a compile."""
    from deepspeed.accelerator import get_accelerator

    clear_stale_build_locks(Path(os.environ["TORCH_EXTENSIONS_DIR"]))
    accelerator = get_accelerator()
    names = ["CPUAdamBuilder", *(["ShareMemCommBuilder"] if accelerator.device_name() == "cpu" else [])]
    for name in names:
        accelerator.create_op_builder(name).load()
    return names


def hidden_size(model: nn.Module) -> int | None:
    """The transformer width the `auto` bucket sizes scale with (a ValueModel wraps a backbone)."""
    for module in (model, getattr(model, "backbone", None)):
        size = getattr(getattr(module, "config", None), "hidden_size", None)
        if size:
            return int(size)
    return None


def param_dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def build_ds_optimizer(model: nn.Module, optim: OptimConfig, *, offload: bool) -> torch.optim.Optimizer:
    """training_args.optim as torch_train builds it; with optimizer offload DeepSpeed's CPU Adam (in
    AdamW or Adam mode: the update runs in compiled C++ on the CPU copy of the fp32 state)."""
    if not offload:
        return build_optimizer(trainable_parameters(model), optim)
    if optim.optimizer == "sgd":
        raise ValueError("training_args.optim=sgd cannot run with strategy_config.zero_optimization."
                         "offload_optimizer: DeepSpeed's CPU offload steps Adam/AdamW; use adamw or turn offload off")
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam(trainable_parameters(model), lr=optim.lr, betas=optim.betas, eps=optim.eps,
                            weight_decay=optim.weight_decay, adamw_mode=optim.optimizer != "adam")


@contextmanager
def gathered(params: list[nn.Parameter]) -> Iterator[None]:
    """Full values of ZeRO-3 partitioned parameters on every rank for the block (collective); a
    no-op for unpartitioned ones (stages 0-2)."""
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        yield


def gathered_state_dict(model: nn.Module, keep: bool) -> dict[str, Tensor]:
    """The model's state dict as full CPU tensors, gathered one module at a time so no rank ever
    holds more than one module's full parameters beyond its shard (plus, where `keep`, the copy it
    returns). Collective: every rank calls it; ranks with keep=False get `{}`.

    Tied weights stay tied: a parameter listed under two names is copied once."""
    copies: dict[int, Tensor] = {}
    params: dict[str, Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        own = list(module.named_parameters(recurse=False, remove_duplicate=False))
        with gathered([p for _, p in own]):
            for name, param in own if keep else ():
                if id(param) not in copies:
                    copies[id(param)] = param.detach().to("cpu", copy=True)
                params[f"{prefix}.{name}" if prefix else name] = copies[id(param)]
    if not keep:
        return {}
    # buffers are never partitioned; the partitioned parameters' entries here are empty placeholders
    current = model.state_dict()
    return {key: params[key] if key in params else value.detach().to("cpu", copy=True) for key, value in current.items()}


class DeepSpeedStrategy(StrategyBase):
    """`deepspeed_train`: training_args.optim under ZeRO stage 0-3, optional CPU offload, bf16/fp16/fp32."""

    def __init__(
        self,
        model: nn.Module,
        optim: OptimConfig,
        *,
        rank: int,
        world_size: int,
        shape: TrainShape,
        device: str = "cpu",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        require_process_group("deepspeed_train", rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.data_parallel = DataParallel(rank, world_size)
        self.device = torch.device(device)
        self.optim = optim
        config = parse_strategy_config(strategy_config)
        self.ds_config = build_ds_config(
            config, precision=resolve_precision(config, param_dtype(model)), hidden_size=hidden_size(model),
            world_size=world_size, shape=shape, max_grad_norm=optim.max_grad_norm,
        )
        model = model.to(self.device)
        self.optimizer = build_ds_optimizer(model, optim, offload=offloads_optimizer(self.ds_config))
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=self.optimizer, config=self.ds_config, dist_init_required=False
        )
        self.model = self.engine.module
        self.optimizer_steps = 0

    def train_step(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over this rank's micro-batches (every rank must bring the same number:
        checked first, a mismatch would hang in a collective). Metrics as torch_train's, per rank."""
        loss_sum, metrics = self.forward_backward(micro_batches, loss_fn)
        return {**metrics, **self.optimizer_step(), "loss": loss_sum.item()}

    def forward_backward(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> tuple[Tensor, dict[str, float]]:
        """Backward on every micro-batch; after it the reduced gradient of the step is in place
        (deepspeed.utils.safe_get_full_grad reads it) until optimizer_step."""
        require_same_micro_batch_count("deepspeed_train", len(micro_batches))
        self.engine.train()
        return accumulate_gradients(self.engine, micro_batches, loss_fn, self.device, backward=self._backward)

    def _backward(self, loss: Tensor, last: bool) -> None:
        # the last micro-batch closes the step: DeepSpeed reduces (ZeRO-0/1) or finishes reducing there
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)

    def optimizer_step(self) -> dict[str, float]:
        """Clip (gradient_clipping) and step at this step's LR, skipping the update on an inf/NaN
        gradient norm; the schedule advances either way (as torch_train's).

        ZeRO (and DeepSpeed's bf16/fp16 optimizers) measure the global norm and skip by themselves.
        Plain fp32 data parallelism (stage 0) steps our AdamW directly on whole, already reduced
        gradients: the norm and the skip are ours there."""
        lr = write_lr(self.optimizer, self.optim, self.optimizer_steps)
        self.optimizer_steps += 1
        if self.engine.optimizer is self.optimizer:
            grad_norm = clip_grad_norm(list(self.model.parameters()), None)
            return step_unless_non_finite(grad_norm, lr, apply=self.engine.step, discard=self.engine.zero_grad)
        self.engine.step()
        grad_norm = self.engine.get_global_grad_norm()
        skipped = not self.engine.was_step_applied()
        return {"grad_norm": float(grad_norm), "lr": float(lr), "update_skipped": float(skipped)}

    def progress(self) -> dict[str, int | None]:
        """The engine's applied updates; the LR schedule follows optimizer_steps (skipped updates included)."""
        return {"optimizer_step": int(self.engine.global_steps), "scheduler_step": self.optimizer_steps}

    def forward_model(self) -> nn.Module:
        return self.engine

    def full_state_dict(self) -> dict[str, Tensor]:
        """Full CPU tensors on rank 0 (in the dtype the model computes in); `{}` on the others. Collective."""
        return gathered_state_dict(self.model, keep=self.rank == 0)

    def save_checkpoint(self, path: Path) -> None:
        """Collective: every rank, the same (shared-filesystem) path."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(
            str(path), tag=CHECKPOINT_TAG, client_state={"optimizer_steps": self.optimizer_steps}, save_latest=False
        )
        save_rank_rng(path, self.rank)
        dist.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Collective. The world size must equal the one that saved (ZeRO partitions are per rank)."""
        path = Path(path)
        load_rank_rng(path, self.rank, self.world_size)  # first: a missing file names a world-size change
        loaded, client_state = self.engine.load_checkpoint(
            str(path), tag=CHECKPOINT_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        if loaded is None:
            raise FileNotFoundError(f"{path / CHECKPOINT_TAG}: no DeepSpeed checkpoint there")
        self.optimizer_steps = int(client_state["optimizer_steps"])


class DeepSpeedForward(StrategyBase):
    """`deepspeed_infer`: a frozen model for forward passes; ZeRO-3 partitions its parameters
    (optionally offloaded to CPU), other stages keep the whole model on every rank."""

    def __init__(
        self,
        model: nn.Module,
        *,
        rank: int,
        world_size: int,
        device: str = "cpu",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        require_process_group("deepspeed_infer", rank, world_size)
        self.rank, self.device = rank, torch.device(device)
        config = parse_strategy_config(strategy_config)
        self.ds_config = build_ds_config(
            config, precision=resolve_precision(config, param_dtype(model)), hidden_size=hidden_size(model),
            world_size=world_size,
        )
        model = model.to(self.device).eval()
        model.requires_grad_(False)
        self.engine, _, _, _ = deepspeed.initialize(model=model, config=self.ds_config, dist_init_required=False)
        self.engine.eval()
        self.model = self.engine.module

    def forward_model(self) -> nn.Module:
        return self.engine

    def full_state_dict(self) -> dict[str, Tensor]:
        """Full CPU tensors on rank 0; `{}` on the others. Collective."""
        return gathered_state_dict(self.model, keep=self.rank == 0)
