"""A tiny Qwen2 trainer the cluster tests place in Ray actors (importable there: the test
session's Ray job has the repo root on its PYTHONPATH)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.trainer.train.tiny_qwen import tiny_qwen2, token_mean_loss
from trainer.train import OptimConfig, build_strategy

OPTIM = OptimConfig(lr=1e-2, warmup_steps=0, lr_scheduler_type="constant", num_training_steps=10, max_grad_norm=None)


class TinyTrainer:
    """A tiny Qwen2 policy behind a training strategy (fsdp2_train when the group is distributed)."""

    def __init__(
        self, role: str, strategy: str, seed: int, strategy_config: dict | None, rank: int, world_size: int
    ) -> None:
        self.rank, self.world_size = rank, world_size
        self.rebuild(strategy, seed, strategy_config)

    def rebuild(self, strategy: str, seed: int, strategy_config: dict | None) -> None:
        """A fresh model and strategy in the same process (and process group)."""
        self.strategy = build_strategy(
            strategy, tiny_qwen2(seed), OPTIM, rank=self.rank, world_size=self.world_size,
            strategy_config=strategy_config,
        )

    def train_step(self, batch: dict[str, torch.Tensor], global_tokens: int, micro_batches: int = 1) -> dict:
        rows = batch["input_ids"].shape[0] // micro_batches
        micro = [{k: v[i * rows : (i + 1) * rows] for k, v in batch.items()} for i in range(micro_batches)]
        return self.strategy.train_step(micro, token_mean_loss(global_tokens))

    def full_grads(self) -> dict[str, torch.Tensor]:
        """Unsharded gradients (collective under FSDP2)."""
        grads = {}
        for name, param in self.strategy.model.named_parameters():
            grad = param.grad
            grads[name] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad.clone()
        return grads

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.strategy.full_state_dict()

    def save(self, path: str) -> None:
        self.strategy.save_checkpoint(Path(path))

    def load(self, path: str) -> None:
        self.strategy.load_checkpoint(Path(path))
