"""`torch_train`: one process, one device, plain PyTorch (the CPU path and the reference the
distributed strategies are tested against)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor, nn

from trainer.checkpoint.core import get_rng_state, set_rng_state
from trainer.train.base import (
    LossFn,
    OptimConfig,
    accumulate_gradients,
    build_optimizer,
    build_scheduler,
    clip_grad_norm,
    eval_mode,
    optimizer_step,
)

T = TypeVar("T")


class TorchStrategy:
    """Checkpoint layout: `model.pt`, `optimizer.pt`, `scheduler.pt`, `rng_rank0.pt` in `path`."""

    def __init__(self, model: nn.Module, optim: OptimConfig, *, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.optim = optim
        self.optimizer = build_optimizer(self.model.parameters(), optim)
        self.scheduler = build_scheduler(self.optimizer, optim)

    def train_step(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step. Gradients stay on the parameters until the next step."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, metrics = accumulate_gradients(self.model, micro_batches, loss_fn, self.device)
        grad_norm = clip_grad_norm(list(self.model.parameters()), self.optim.max_grad_norm)
        return {**metrics, **optimizer_step(self.optimizer, self.scheduler, grad_norm), "loss": loss_sum.item()}

    def forward_no_grad(self, fn: Callable[[nn.Module], T]) -> T:
        with eval_mode(self.model), torch.no_grad():
            return fn(self.model)

    def full_state_dict(self) -> dict[str, Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save_checkpoint(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        torch.save(self.model.state_dict(), path / "model.pt")
        torch.save(self.optimizer.state_dict(), path / "optimizer.pt")
        torch.save(self.scheduler.state_dict(), path / "scheduler.pt")
        torch.save(get_rng_state(), path / "rng_rank0.pt")

    def load_checkpoint(self, path: Path) -> None:
        path = Path(path)
        self.model.load_state_dict(torch.load(path / "model.pt", map_location=self.device, weights_only=True))
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
        self.scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=True))
        set_rng_state(torch.load(path / "rng_rank0.pt", weights_only=True))

