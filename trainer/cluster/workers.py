"""Role workers: actor_train, actor_infer, reference, critic, reward.

Plain classes constructed with ``(role, cfg, rank, world_size)``; the same class runs in the
driver process (``LocalWorkerGroup``) or as a Ray actor (``WorkerGroup``). Batches are dicts of CPU
tensors laid out as in ``trainer.pipeline.batch``; a worker only ever sees its own data shard.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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


def load_role_model(cfg: PipelineConfig, role: str, *, training: bool = False) -> nn.Module:
    """The role's HF model as its model_args say: dtype, attention kernel, remote code, config
    overrides; training roles recompute activations in backward unless
    disable_gradient_checkpointing is set (ROLL's default)."""
    from trainer.models.loading import load_model

    args = _role_cfg(cfg, role).model_args
    model = load_model(_model_path(cfg, role), dtype=args.dtype, attn_implementation=args.attn_implementation,
                       trust_remote_code=args.trust_remote_code, config_overrides=args.model_config_kwargs)
    if training and not args.disable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _seed_training_role(cfg: PipelineConfig, role: str, rank: int, offset: int = 0) -> None:
    """Seed a training rank (training_args.seed, else the pipeline seed) and set TF32 as asked."""
    args = _role_cfg(cfg, role).training_args
    _seed_everything((cfg.seed if args.seed is None else args.seed) + offset + rank)
    if args.tf32 is not None:  # only matters on Ampere+ GPUs; harmless elsewhere
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _optim_config(cfg: PipelineConfig, role: str, num_training_steps: int) -> Any:
    from trainer.train.base import OptimConfig

    return OptimConfig.from_training_args(_role_cfg(cfg, role).training_args, num_training_steps)


def strategy_name(section: Any, default: str) -> str:
    """The role's strategy_args.strategy_name, or the schema's documented default when unset."""
    return section.strategy_args.strategy_name if section.strategy_args is not None else default


def needs_process_group(cfg: PipelineConfig, role: str) -> bool:
    """Whether the role's ranks must join one torch.distributed group (sharded strategies), even a
    group of one."""
    from trainer.train import PROCESS_GROUP_STRATEGIES

    section = getattr(cfg, role, None)
    return section is not None and strategy_name(section, "") in PROCESS_GROUP_STRATEGIES


def _build_train_strategy(cfg: PipelineConfig, role: str, model: nn.Module, rank: int, world_size: int) -> Any:
    from trainer.train import build_strategy

    section = _role_cfg(cfg, role)
    shape = train_shape(cfg, role, world_size)
    # the LR schedule's length: training_args.max_steps when set, else every step of the run
    steps = section.training_args.max_steps
    if steps <= 0:
        steps = cfg.max_steps * shape.optimizer_steps_per_rollout
    return build_strategy(strategy_name(section, "torch_train"), model, _optim_config(cfg, role, steps),
                          rank=rank, world_size=world_size, device=_device(),
                          strategy_config=_strategy_options(section), shape=shape)


def _strategy_options(section: Any) -> dict[str, Any] | None:
    """Only what the config sets: the strategy applies its own defaults to the rest."""
    return (section.strategy_args.strategy_config.model_dump(exclude_unset=True)
            if section.strategy_args is not None else None)


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
        dp_rank = _data_parallel(self.strategy, self.rank, self.world_size)[0]
        gen = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + step * 101 + epoch * 7 + dp_rank)
        order = torch.randperm(rows, generator=gen)
        return [{k: v[order[i : i + per_rank]] for k, v in batch.items()} for i in range(0, rows, per_rank)]

    def _global_counts(self, mini: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Real tokens and non-empty sequences of this mini-batch, summed over the data-parallel ranks."""
        mask = mini["response_mask"] > 0
        counts = torch.stack([mask.sum(), mask.any(-1).sum()]).float()
        _, dp_size, dp_group = _data_parallel(self.strategy, self.rank, self.world_size)
        if dp_size > 1 and dist.is_initialized():
            dist.all_reduce(counts, group=dp_group)
        return counts[0], counts[1]

    def _update(self, batch: dict[str, Tensor], step: int, loss_fn: Any) -> dict[str, float]:
        args = _role_cfg(self.cfg, self.role).training_args
        batch, _ = _own_rows(self.strategy, batch)
        dp_size = _data_parallel(self.strategy, self.rank, self.world_size)[1]
        totals: dict[str, list[float]] = {}
        for epoch in range(self.cfg.ppo_epochs):
            for mini in self._mini_batches(batch, step, epoch):
                micro = split_rows(mini, args.per_device_train_batch_size)
                losses.attach_normalisers(micro, *self._global_counts(mini), dp_size)
                result = self.strategy.train_step(micro, loss_fn)
                # "loss" is this data-parallel rank's share of the global loss: x dp so the rank mean is
                # the total
                result["loss"] = result["loss"] * dp_size
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
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        _seed_training_role(cfg, role, rank)
        model = load_role_model(cfg, role, training=True)
        self.temperature = _sampling_temperature(cfg)
        self.strategy = _build_train_strategy(cfg, role, model, rank, world_size)

    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        chunk = _role_cfg(self.cfg, self.role).infer_batch_size
        return _forward_in_chunks(_logprobs_fn(self.temperature), self.strategy, batch, chunk)

    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        loss_fn = losses.make_actor_loss(self.cfg, self.temperature)
        return self._update(batch, step, loss_fn)

    def full_state_dict(self) -> dict[str, Tensor]:
        return self.strategy.full_state_dict()

    def weight_buckets(self, device: str, dtype: torch.dtype, bucket_bytes: int) -> Iterator[dict[str, Tensor]]:
        """The full weights for an engine in this process, bucketed on its device and in its dtype
        (no round trip through the CPU when both share a GPU)."""
        return self.strategy.full_weights(device=device, dtype=dtype, bucket_bytes=bucket_bytes)

    def save_hf(self, path: str, tokenizer_path: str) -> None:
        """Write the policy in Hugging Face format (rank 0 writes; every rank must call it, since
        gathering the full weights is a collective under fsdp2_train)."""
        state = self.strategy.full_state_dict()
        if self.rank != 0:
            return
        from trainer.models.loading import load_tokenizer

        # megatron keeps the HF architecture as a weight-less skeleton (hf_model) next to its own model
        getattr(self.strategy, "hf_model", self.strategy.model).save_pretrained(path, state_dict=state)
        load_tokenizer(tokenizer_path).save_pretrained(path)


class CriticWorker(_TrainedRole):
    """A value head on the policy's backbone, trained with the clipped value loss (GAE / PPO)."""

    role_prefix = "critic"

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        _seed_training_role(cfg, role, rank, offset=17)
        model = ValueModel(load_role_model(cfg, role, training=True))
        self.strategy = _build_train_strategy(cfg, role, model, rank, world_size)

    def compute_values(self, batch: dict[str, Tensor]) -> Tensor:
        return _forward_in_chunks(
            response_values, self.strategy, batch, _role_cfg(self.cfg, self.role).infer_batch_size
        )

    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        return self._update(batch, step, losses.make_critic_loss(self.cfg))


class ReferenceWorker(_RoleBase):
    """The frozen initial policy: log-probs for the KL penalty / KL loss. hf_infer (the default) and
    torch_train hold the whole model; fsdp2_infer and deepspeed_infer shard it over the role's ranks."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        from trainer.train import build_forward_strategy

        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = _role_cfg(cfg, role)
        self.strategy = build_forward_strategy(strategy_name(section, "hf_infer"), load_role_model(cfg, role),
                                               rank=rank, world_size=world_size, device=_device(),
                                               strategy_config=_strategy_options(section))
        self.temperature = _sampling_temperature(cfg)

    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        chunk = _role_cfg(self.cfg, self.role).infer_batch_size
        return _forward_in_chunks(_logprobs_fn(self.temperature), self.strategy, batch, chunk)


class ActorInferWorker(_RoleBase):
    """The rollout engine (``hf_infer`` or ``vllm``): samples responses, receives new weights after updates."""

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        section = _role_cfg(cfg, role)
        name = strategy_name(section, "hf_infer")
        if name == "vllm":
            self.engine = _vllm_engine(cfg, role, rank)
        elif name == "hf_infer":
            self.engine = _hf_engine(cfg, role)
        else:
            raise ValueError(
                f"{role}.strategy_args.strategy_name: {name!r} is not available in this build; valid: hf_infer, vllm"
            )

    def generate(self, batch: dict[str, Any], params: SamplingParams) -> list[Generation]:
        """Generate for this rank's prompt shard; the seed is offset by rank so shards differ."""
        if params.seed is not None and self.rank:
            params = SamplingParams(**{**params.__dict__, "seed": params.seed + 7919 * self.rank})
        return self.engine.generate(list(batch["prompt_ids"]), params)

    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        self.engine.load_weights(state_dict)

    def weight_format(self) -> tuple[str, torch.dtype]:
        """Where the engine's weights live now and their dtype: what an in-process sync should send."""
        weight = next(self.engine.model.parameters())
        return str(weight.device), weight.dtype

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()

    def shutdown(self) -> None:
        """Release an in-process engine's resources (vllm); hf_infer has none beyond its model."""
        if hasattr(self.engine, "shutdown"):
            self.engine.shutdown()


def _hf_engine(cfg: PipelineConfig, role: str) -> Any:
    from trainer.models.loading import load_tokenizer
    from trainer.rollout.hf import HFInferEngine

    section = _role_cfg(cfg, role)
    path = _model_path(cfg, role)
    tokenizer = load_tokenizer(path, trust_remote_code=section.model_args.trust_remote_code)
    eos = {tokenizer.eos_token_id}
    model = load_role_model(cfg, role)
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    return HFInferEngine(
        model,
        eos_token_ids=sorted(eos),
        pad_token_id=tokenizer.pad_token_id,
        device=_device(),
        max_batch_size=section.infer_batch_size if section.infer_batch_size > 1 else None,
        decode=tokenizer.decode,
    )


def _vllm_engine(cfg: PipelineConfig, role: str, rank: int) -> Any:
    """One in-process vLLM engine from the role's strategy_config and model_args (seed: pipeline seed + rank)."""
    from trainer.rollout.vllm import VllmEngine, engine_dtype, engine_kwargs

    section = _role_cfg(cfg, role)
    path = _model_path(cfg, role)
    options = section.strategy_args.strategy_config
    colocated = bool(set(section.device_mapping or ()) & set(cfg.actor_train.device_mapping or ()))
    kwargs = engine_kwargs(
        options.model_dump(), dtype=engine_dtype(path, section.model_args.dtype), seed=cfg.seed + rank,
        on_gpu=torch.cuda.is_available(), colocated=colocated,
        trust_remote_code=section.model_args.trust_remote_code, hf_overrides=section.model_args.model_config_kwargs,
    )
    return VllmEngine(path, kwargs, sleep_level=options.sleep_level)


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


def _forward_in_chunks(fn: Any, strategy: Any, batch: dict[str, Tensor], chunk: int) -> Tensor:
    """fn(model, rows) over chunks of `chunk` rows under the strategy's forward_no_grad (which puts
    the rows on the strategy's device); this rank's rows, back on the CPU."""
    rows, own = _own_rows(strategy, batch)
    parts = split_rows(rows, max(1, chunk or rows["response_mask"].size(0)))
    out = [strategy.forward_no_grad(fn, part).detach().cpu() for part in parts]
    return torch.cat(out, dim=0)[own]


def _logprobs_fn(temperature: float) -> Any:
    """response_logprobs, or the model's own where it has one (megatron: from the vocab-sharded logits,
    without gathering the vocabulary)."""

    def fn(model: nn.Module, part: dict[str, Tensor]) -> Tensor:
        own = getattr(model, "response_logprobs", None)
        return own(part, temperature) if own is not None else response_logprobs(model, part, temperature)

    return fn


def _data_parallel(strategy: Any, rank: int, world_size: int) -> tuple[int, int, Any]:
    """(rank, size, group) of this rank in data parallelism: every rank is its own, except under
    megatron, whose model-parallel group (TP × PP) shares one data-parallel rank."""
    dp = getattr(strategy, "data_parallel", None)
    return (rank, world_size, None) if dp is None else (dp.rank, dp.size, dp.group)


def _own_rows(strategy: Any, batch: dict[str, Tensor]) -> tuple[dict[str, Tensor], slice]:
    """The rows this rank computes on and the slice of them it answers for. The worker group hands
    every rank its own slice; megatron's model-parallel ranks join theirs (they compute together)."""
    join = getattr(strategy, "join_model_parallel_rows", None)
    return join(batch) if join is not None else (batch, slice(None))


WORKER_CLASSES: dict[str, type] = {
    "actor_train": ActorTrainWorker,
    "actor_infer": ActorInferWorker,
    "reference": ReferenceWorker,
    "critic": CriticWorker,
    "reward": RewardWorker,
}
