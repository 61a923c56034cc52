"""`torch_train`: one process, one device, plain PyTorch (the CPU path and the reference the
distributed strategies are tested against).

Mixed precision (`strategy_config.param_dtype`, else the role's `model_args.dtype`): bf16 or fp16
computes forward and backward under `torch.autocast` while the parameters — the master weights — and
the optimizer state stay fp32, as plain PyTorch training on a GPU does. fp16 adds a gradient scaler
(its small exponent range underflows gradients otherwise); bf16 needs none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trainer.checkpoint.core import load_rank_rng, save_rank_rng
from trainer.train.base import OptimConfig, TrainStrategyBase

COMPUTE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
STRATEGY_CONFIG_KEYS = ("param_dtype",)


def compute_dtype(model: nn.Module, strategy_config: Mapping[str, Any] | None) -> torch.dtype:
    """The dtype torch_train computes in: strategy_config.param_dtype when set, else the dtype the
    model was loaded in (model_args.dtype)."""
    options = dict(strategy_config or {})
    unknown = sorted(set(options) - set(STRATEGY_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"strategy_config: unknown key(s) {unknown} for torch_train; valid: "
                         f"{', '.join(STRATEGY_CONFIG_KEYS)}")
    name = options.get("param_dtype")
    if name is None:
        return next(model.parameters()).dtype
    if name not in COMPUTE_DTYPES:
        raise ValueError(f"strategy_config.param_dtype={name!r} is not valid for torch_train; "
                         f"use one of {', '.join(COMPUTE_DTYPES)}")
    return COMPUTE_DTYPES[name]


class TorchStrategy(TrainStrategyBase):
    """Checkpoint layout: `model.pt`, `optimizer.pt`, `scheduler.pt`, `rng_rank0.pt` in `path`
    (and `grad_scaler.pt` under fp16)."""

    name = "torch_train"

    def __init__(self, model: nn.Module, optim: OptimConfig, *, device: str = "cpu",
                 strategy_config: dict[str, Any] | None = None) -> None:
        self.device = torch.device(device)
        self.dtype = compute_dtype(model, strategy_config)
        # master weights in fp32 whatever the model was loaded in; autocast computes in self.dtype
        self.model = model.to(self.device, torch.float32)
        self.init_optimizer(optim)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.dtype == torch.float16 else None

    def compute_context(self) -> AbstractContextManager[Any]:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def full_state_dict(self) -> dict[str, Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save_checkpoint(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict(), path / "model.pt")
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), path / "scheduler.pt")
        if self.scaler is not None:
            torch.save(self.scaler.state_dict(), path / "grad_scaler.pt")
        save_rank_rng(path, 0)

    def load_checkpoint(self, path: Path) -> None:
        path = Path(path)
        self.model.load_state_dict(torch.load(path / "model.pt", map_location=self.device, weights_only=True))
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        self.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
        if self.scaler is not None and (path / "grad_scaler.pt").exists():
            self.scaler.load_state_dict(torch.load(path / "grad_scaler.pt", weights_only=True))
        load_rank_rng(path, 0, 1)
