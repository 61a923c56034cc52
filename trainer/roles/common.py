"""What every role worker shares: seeding, loading its model, building its strategy, RNG files and
forward passes in chunks. Plain functions of the config; the role classes call them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from trainer.checkpoint.core import load_rank_rng, save_rank_rng
from trainer.config import topology
from trainer.config.topology import train_shape
from trainer.models import lora
from trainer.models.batch import response_logprobs, split_rows
from trainer.train import PROCESS_GROUP_STRATEGIES, OptimConfig, TrainStrategy, build_strategy
from trainer.train.base import StrategyBase

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig, WorkerConfig


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def role_section(cfg: PipelineConfig, role: str) -> WorkerConfig:
    section = getattr(cfg, role, None)
    if section is None:
        raise ValueError(f"{role}: this role has no section in the config")
    return section


def model_path(cfg: PipelineConfig, role: str) -> str:
    path = role_section(cfg, role).model_args.model_name_or_path or cfg.pretrain
    if not path:
        raise ValueError(f"{role}.model_args.model_name_or_path: empty (and no top-level `pretrain`)")
    return str(path)


def load_role_model(cfg: PipelineConfig, role: str, *, training: bool = False) -> nn.Module:
    """The role's HF model as its model_args say: dtype, attention kernel, remote code, config
    overrides; training roles recompute activations in backward unless
    disable_gradient_checkpointing is set (ROLL's default), and train LoRA adapters on a frozen model
    when lora_target is set (trainer.models.lora)."""
    from trainer.models.loading import load_model

    args = role_section(cfg, role).model_args
    model = load_model(model_path(cfg, role), dtype=args.dtype, attn_implementation=args.attn_implementation,
                       trust_remote_code=args.trust_remote_code, config_overrides=args.model_config_kwargs)
    if training and not args.disable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if training and lora.lora_enabled(args):
        model = lora.add_lora(model, args)
    return model


def seed_training_role(cfg: PipelineConfig, role: str, rank: int, offset: int = 0) -> None:
    """Seed a training rank (training_args.seed, else the pipeline seed) and set TF32 as asked."""
    args = role_section(cfg, role).training_args
    seed_everything((cfg.seed if args.seed is None else args.seed) + offset + rank)
    if args.tf32 is not None:  # only matters on Ampere+ GPUs; harmless elsewhere
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def needs_process_group(cfg: PipelineConfig, role: str) -> bool:
    """Whether the role's ranks must join one torch.distributed group (sharded strategies), even a
    group of one."""
    section = getattr(cfg, role, None)
    return section is not None and topology.strategy_name(role, section) in PROCESS_GROUP_STRATEGIES


def strategy_options(section: WorkerConfig) -> dict[str, Any] | None:
    """Only what the config sets: the strategy applies its own defaults to the rest."""
    return (section.strategy_args.strategy_config.model_dump(exclude_unset=True)
            if section.strategy_args is not None else None)


def build_train_strategy(cfg: PipelineConfig, role: str, model: nn.Module, rank: int, world_size: int) -> TrainStrategy:
    section = role_section(cfg, role)
    shape = train_shape(cfg, role, world_size)
    # the LR schedule's length: training_args.max_steps when set, else every step of the run
    steps = section.training_args.max_steps
    if steps <= 0:
        steps = cfg.max_steps * shape.optimizer_steps_per_rollout
    return build_strategy(topology.strategy_name(role, section), model,
                          OptimConfig.from_training_args(section.training_args, steps),
                          rank=rank, world_size=world_size, device=device(),
                          strategy_config=strategy_options(section), shape=shape)


class RoleBase:
    """What every role answers: its RNG (each rank its own file, in the role's folder) and a ping."""

    role: str
    rank: int
    world_size: int

    def save_rng(self, path: str) -> None:
        save_rank_rng(Path(path) / self.role, self.rank)

    def load_rng(self, path: str) -> None:
        load_rank_rng(Path(path) / self.role, self.rank, self.world_size)

    def ping(self) -> str:
        return f"{self.role}:{self.rank}"


def sampling_temperature(cfg: PipelineConfig) -> float:
    """Log-probs for PPO ratios use the sampling temperature, as the rollout engine reports them."""
    args = cfg.actor_infer.generating_args
    return args.temperature if args is not None and args.temperature > 0 and args.do_sample else 1.0


def forward_in_chunks(fn: Callable[[nn.Module, dict[str, Tensor]], Tensor], strategy: StrategyBase,
                      batch: dict[str, Tensor], chunk: int) -> Tensor:
    """fn(model, rows) over chunks of `chunk` rows under the strategy's forward_no_grad (which puts
    the rows on the strategy's device); this rank's rows, back on the CPU."""
    rows, own = strategy.join_model_parallel_rows(batch)
    parts = split_rows(rows, max(1, chunk or rows["response_mask"].size(0)))
    out = [strategy.forward_no_grad(fn, part).detach().cpu() for part in parts]
    return torch.cat(out, dim=0)[own]


def logprobs_fn(temperature: float) -> Callable[[nn.Module, dict[str, Tensor]], Tensor]:
    """response_logprobs, or the model's own where it has one (megatron: from the vocab-sharded logits,
    without gathering the vocabulary)."""

    def fn(model: nn.Module, part: dict[str, Tensor]) -> Tensor:
        own = getattr(model, "response_logprobs", None)
        return own(part, temperature) if own is not None else response_logprobs(model, part, temperature)

    return fn
