"""Role workers: actor_train, actor_infer, reference, critic, reward.

Plain classes constructed with ``(role, cfg, rank, world_size)``; the same class runs in the
driver process (``LocalWorkerGroup``) or as a Ray actor (``WorkerGroup``). Batches are dicts of CPU
tensors laid out as in ``trainer.pipeline.batch``; a worker only ever sees its own data shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from trainer.checkpoint.core import get_rng_state, set_rng_state
from trainer.config.topology import train_shape
from trainer.models.value import ValueModel, response_values
from trainer.pipeline import losses
from trainer.pipeline.batch import response_logprobs, split_rows
from trainer.rollout.base import Generation, SamplingParams

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


def _seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _role_cfg(cfg: PipelineConfig, role: str) -> Any:
    section = getattr(cfg, role, None)
    if section is None:
        raise ValueError(f"{role}: this role has no section in the config")
    return section


def _model_path(cfg: PipelineConfig, role: str) -> str:
    path = _role_cfg(cfg, role).model_args.model_name_or_path or cfg.pretrain
    if not path:
        raise ValueError(f"{role}.model_args.model_name_or_path: empty (and no top-level `pretrain`)")
    return str(path)


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _optim_config(cfg: PipelineConfig, role: str, num_training_steps: int) -> Any:
    from trainer.train.base import OptimConfig

    return OptimConfig.from_training_args(_role_cfg(cfg, role).training_args, num_training_steps)


def strategy_name(section: Any, default: str) -> str:
    """The role's strategy_args.strategy_name, or the schema's documented default when unset."""
    return section.strategy_args.strategy_name if section.strategy_args is not None else default


def _build_train_strategy(cfg: PipelineConfig, role: str, model: nn.Module, rank: int, world_size: int) -> Any:
    from trainer.train import build_strategy

    section = _role_cfg(cfg, role)
    steps = cfg.max_steps * train_shape(cfg, role, world_size).optimizer_steps_per_rollout
    # only what the config sets: the strategy applies its own defaults to the rest
    options = (section.strategy_args.strategy_config.model_dump(exclude_unset=True)
               if section.strategy_args is not None else None)
    return build_strategy(strategy_name(section, "torch_train"), model, _optim_config(cfg, role, steps),
                          rank=rank, world_size=world_size, device=_device(), strategy_config=options)


class _RoleBase:
    """RNG capture shared by every role (each rank saves its own file)."""

    role: str
    rank: int

    def save_rng(self, path: str) -> None:
        target = Path(path) / self.role
        target.mkdir(parents=True, exist_ok=True)
        torch.save(get_rng_state(), target / f"rng_rank{self.rank}.pt")

    def load_rng(self, path: str) -> None:
        file = Path(path) / self.role / f"rng_rank{self.rank}.pt"
        set_rng_state(torch.load(file, weights_only=False))

    def ping(self) -> str:
        return f"{self.role}:{self.rank}"


class _TrainedRole(_RoleBase):
    """actor_train and critic: a model behind a training strategy, updated over mini-batches."""

    strategy: Any

    def _mini_batches(self, batch: dict[str, Tensor], step: int, epoch: int) -> list[dict[str, Tensor]]:
        rows = batch["response_mask"].size(0)
        per_rank = train_shape(self.cfg, self.role, self.world_size).rows_per_mini_batch
        if rows % per_rank:
            raise ValueError(
                f"{self.role}.training_args: this rank holds {rows} samples, not a multiple of "
                f"per_device_train_batch_size × gradient_accumulation_steps = {per_rank}"
            )
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + step * 101 + epoch * 7 + self.rank)
        order = torch.randperm(rows, generator=gen)
        return [{k: v[order[i : i + per_rank]] for k, v in batch.items()} for i in range(0, rows, per_rank)]

    def _global_counts(self, mini: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Real tokens and non-empty sequences of this mini-batch, summed over the data-parallel ranks."""
        mask = mini["response_mask"] > 0
        counts = torch.stack([mask.sum(), mask.any(-1).sum()]).float()
        if self.world_size > 1 and dist.is_initialized():
            dist.all_reduce(counts)
        return counts[0], counts[1]

    def _update(self, batch: dict[str, Tensor], step: int, loss_fn: Any) -> dict[str, float]:
        args = _role_cfg(self.cfg, self.role).training_args
        totals: dict[str, list[float]] = {}
        for epoch in range(self.cfg.ppo_epochs):
            for mini in self._mini_batches(batch, step, epoch):
                micro = split_rows(mini, args.per_device_train_batch_size)
                losses.attach_normalisers(micro, *self._global_counts(mini), self.world_size)
                result = self.strategy.train_step(micro, loss_fn)
                # "loss" is this rank's share of the global loss: x world_size so the rank mean is the total
                result["loss"] = result["loss"] * self.world_size
                for key, value in result.items():
                    totals.setdefault(key, []).append(float(value))
        return {f"{self.role_prefix}/{k}": sum(v) / len(v) for k, v in totals.items()}

    def save_checkpoint(self, path: str) -> None:
        target = Path(path) / self.role
        target.mkdir(parents=True, exist_ok=True)
        self.strategy.save_checkpoint(target / "strategy")
        self.save_rng(path)

    def load_checkpoint(self, path: str) -> None:
        self.strategy.load_checkpoint(Path(path) / self.role / "strategy")
        self.load_rng(path)


class ActorTrainWorker(_TrainedRole):
    """The policy being trained: old log-probs, PPO/GRPO updates, full weights for sync."""

    role_prefix = "actor"

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.models.loading import load_model

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        _seed_everything(cfg.seed + rank)
        section = _role_cfg(cfg, role)
        model = load_model(_model_path(cfg, role), dtype=section.model_args.dtype)
        self.temperature = _sampling_temperature(cfg)
        self.strategy = _build_train_strategy(cfg, role, model, rank, world_size)

    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        return _forward_in_chunks(
            lambda model, part: response_logprobs(model, part, self.temperature),
            self.strategy.forward_no_grad,
            batch,
            _role_cfg(self.cfg, self.role).infer_batch_size,
        )

    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        loss_fn = losses.make_actor_loss(self.cfg, self.temperature)
        return self._update(batch, step, loss_fn)

    def full_state_dict(self) -> dict[str, Tensor]:
        return self.strategy.full_state_dict()

    def save_hf(self, path: str, tokenizer_path: str) -> None:
        """Write the policy in Hugging Face format (rank 0 writes; every rank must call it, since
        gathering the full weights is a collective under fsdp2_train)."""
        state = self.strategy.full_state_dict()
        if self.rank != 0:
            return
        from trainer.models.loading import load_tokenizer

        self.strategy.model.save_pretrained(path, state_dict=state)
        load_tokenizer(tokenizer_path).save_pretrained(path)


class CriticWorker(_TrainedRole):
    """A value head on the policy's backbone, trained with the clipped value loss (GAE / PPO)."""

    role_prefix = "critic"

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.models.loading import load_model

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        _seed_everything(cfg.seed + 17 + rank)
        section = _role_cfg(cfg, role)
        model = ValueModel(load_model(_model_path(cfg, role), dtype=section.model_args.dtype))
        self.strategy = _build_train_strategy(cfg, role, model, rank, world_size)

    def compute_values(self, batch: dict[str, Tensor]) -> Tensor:
        return _forward_in_chunks(
            response_values, self.strategy.forward_no_grad, batch, _role_cfg(self.cfg, self.role).infer_batch_size
        )

    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        return self._update(batch, step, losses.make_critic_loss(self.cfg))


class ReferenceWorker(_RoleBase):
    """The frozen initial policy: log-probs for the KL penalty / KL loss."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.models.loading import load_model

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = _role_cfg(cfg, role)
        self.model = load_model(_model_path(cfg, role), dtype=section.model_args.dtype).to(_device()).eval()
        self.model.requires_grad_(False)
        self.temperature = _sampling_temperature(cfg)

    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        def run(fn: Any) -> Any:
            with torch.no_grad():
                return fn(self.model)

        return _forward_in_chunks(
            lambda model, part: response_logprobs(model, part, self.temperature),
            run,
            batch,
            _role_cfg(self.cfg, self.role).infer_batch_size,
        )


class ActorInferWorker(_RoleBase):
    """The rollout engine (``hf_infer``): samples responses, receives new weights after updates."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.models.loading import load_model, load_tokenizer
        from trainer.rollout.hf import HFInferEngine

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = _role_cfg(cfg, role)
        name = strategy_name(section, "hf_infer")
        if name != "hf_infer":
            raise ValueError(
                f"{role}.strategy_args.strategy_name: {name!r} is not available in this build; valid: hf_infer"
            )
        path = _model_path(cfg, role)
        tokenizer = load_tokenizer(path)
        eos = {tokenizer.eos_token_id}
        model = load_model(path, dtype=section.model_args.dtype)
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        self.engine = HFInferEngine(
            model,
            eos_token_ids=sorted(eos),
            pad_token_id=tokenizer.pad_token_id,
            device=_device(),
            max_batch_size=section.infer_batch_size if section.infer_batch_size > 1 else None,
        )

    def generate(self, batch: dict[str, Any], params: SamplingParams) -> list[Generation]:
        """Generate for this rank's prompt shard; the seed is offset by rank so shards differ."""
        if params.seed is not None and self.rank:
            params = SamplingParams(**{**params.__dict__, "seed": params.seed + 7919 * self.rank})
        return self.engine.generate(list(batch["prompt_ids"]), params)

    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        self.engine.load_weights(state_dict)

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()


class RewardWorker(_RoleBase):
    """Scores responses with the reward functions named in the config's ``rewards`` section."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.pipeline.rewarding import build_reward_fn

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        self.reward_fn = build_reward_fn(cfg)

    def score(self, batch: dict[str, Any]) -> list[float]:
        return self.reward_fn(list(batch["prompts"]), list(batch["responses"]), list(batch["samples"]))


def _sampling_temperature(cfg: PipelineConfig) -> float:
    """Log-probs for PPO ratios use the sampling temperature, as the rollout engine reports them."""
    args = cfg.actor_infer.generating_args
    return args.temperature if args is not None and args.temperature > 0 and args.do_sample else 1.0


def _forward_in_chunks(fn: Any, runner: Any, batch: dict[str, Tensor], chunk: int) -> Tensor:
    parts = split_rows(batch, max(1, chunk or batch["response_mask"].size(0)))
    return torch.cat([runner(lambda model, p=p: fn(model, p)).detach().cpu() for p in parts], dim=0)


WORKER_CLASSES: dict[str, type] = {
    "actor_train": ActorTrainWorker,
    "actor_infer": ActorInferWorker,
    "reference": ReferenceWorker,
    "critic": CriticWorker,
    "reward": RewardWorker,
}
