"""One rank of a tiny Qwen2 behind deepspeed_train / deepspeed_infer / fsdp2_infer, placed in Ray
actors by the cluster tests (importable there: the test session puts the repo root on PYTHONPATH).
The group keeps its processes and gloo group while `build` swaps strategies, so DeepSpeed is
imported and its ops loaded once per test module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.trainer.train.tiny_qwen import split_rows, tiny_qwen2, token_mean_loss
from trainer.config.topology import TrainShape
from trainer.train import OptimConfig, build_forward_strategy, build_strategy

OPTIM = OptimConfig(lr=1e-2, lr_scheduler_type="constant", num_training_steps=10, max_grad_norm=None)


def shape(world_size: int, micro_batch: int, grad_accum: int) -> TrainShape:
    samples = micro_batch * grad_accum * world_size
    return TrainShape("actor_train", world_size, micro_batch, grad_accum, samples, ppo_epochs=1)


class ShardedTiny:
    def __init__(self, role: str, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.strategy: Any = None
        self.grads: dict[str, torch.Tensor] = {}

    def build(self, name: str, strategy_config: dict | None, micro_batches: int = 1, rows: int = 2,
              optim: OptimConfig = OPTIM, checkpointing: bool = False) -> None:
        model = tiny_qwen2(0)
        if checkpointing:  # as the training workers do unless model_args.disable_gradient_checkpointing
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if name.endswith("_infer"):
            self.strategy = build_forward_strategy(name, model, rank=self.rank, world_size=self.world_size,
                                                   strategy_config=strategy_config)
        else:
            self.strategy = build_strategy(name, model, optim, rank=self.rank, world_size=self.world_size,
                                           strategy_config=strategy_config,
                                           shape=shape(self.world_size, rows // micro_batches, micro_batches))

    def step(self, batch: dict[str, torch.Tensor], global_tokens: int, micro_batches: int = 1,
             read_grads: bool = True) -> dict:
        """One optimizer step, keeping the step's reduced full gradients (read between backward and
        update with DeepSpeed's documented safe_get_full_grad; a collective under ZeRO)."""
        from deepspeed.utils import safe_get_full_grad

        micro = split_rows(batch, micro_batches)
        loss, metrics = self.strategy.forward_backward(micro, token_mean_loss(global_tokens))
        if read_grads:
            params = self.strategy.model.named_parameters()
            self.grads = {n: safe_get_full_grad(p).detach().clone() for n, p in params}
        return {**metrics, **self.strategy.optimizer_step(), "loss": loss.item()}

    def train_step(self, batch: dict[str, torch.Tensor], global_tokens: int) -> dict:
        return self.strategy.train_step([batch], token_mean_loss(global_tokens))

    def nan_step(self, batch: dict[str, torch.Tensor], global_tokens: int) -> dict:
        """A step whose loss (so every gradient) is NaN."""
        base = token_mean_loss(global_tokens)

        def loss_fn(model: Any, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
            loss, metrics = base(model, micro)
            return loss * float("nan"), metrics

        return self.strategy.train_step([batch], loss_fn)

    def last_grads(self) -> dict[str, torch.Tensor]:
        return self.grads

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.strategy.forward_no_grad(
            lambda model, rows: model(input_ids=rows["input_ids"], attention_mask=rows["attention_mask"]).logits,
            batch,
        )

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.strategy.full_state_dict()

    def gathered_sizes(self) -> list[int]:
        """Elements each all-gather of full_state_dict brought in at once (full sizes, from ds_shape)."""
        from trainer.train import deepspeed_strategy

        sizes: list[int] = []
        real = deepspeed_strategy.gathered

        def recording(params: list) -> Any:
            sizes.append(sum(int(torch.Size(getattr(p, "ds_shape", p.shape)).numel()) for p in params))
            return real(params)

        deepspeed_strategy.gathered = recording
        try:
            self.strategy.full_state_dict()
        finally:
            deepspeed_strategy.gathered = real
        return sizes

    def local_numel(self) -> int:
        """Parameter elements this rank holds (ZeRO-3 keeps a partition; the module's own tensors are empty)."""
        return sum(getattr(p, "ds_tensor", p).numel() for p in self.strategy.model.parameters())

    def engine_settings(self) -> dict[str, Any]:
        """What the DeepSpeed engine runs with (its public accessors)."""
        engine = self.strategy.engine
        return {
            "stage": engine.zero_optimization_stage(),
            "overlap_comm": engine.zero_overlap_comm(),
            "reduce_bucket_size": engine.zero_reduce_bucket_size(),
            "offload_optimizer": engine.zero_offload_optimizer() is not None
            and engine.zero_offload_optimizer().device != "none",
            "offload_param": engine.zero_offload_param() is not None and engine.zero_offload_param().device != "none",
            "bf16": engine.bfloat16_enabled(),
            "gradient_clipping": engine.gradient_clipping(),
            "train_batch_size": engine.train_batch_size(),
            "train_micro_batch_size_per_gpu": engine.train_micro_batch_size_per_gpu(),
            "gradient_accumulation_steps": engine.gradient_accumulation_steps(),
            "optimizer": type(self.strategy.optimizer).__name__,
            "module_dtype": str(next(self.strategy.model.parameters()).dtype),
            "checkpointing": self.strategy.model.is_gradient_checkpointing,
        }

    def save(self, path: str) -> None:
        self.strategy.save_checkpoint(Path(path))

    def load(self, path: str) -> None:
        self.strategy.load_checkpoint(Path(path))
