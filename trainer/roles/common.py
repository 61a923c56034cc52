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
from trainer.config.schema import VllmConfig
from trainer.config.topology import train_shape
from trainer.models import adapters, lora
from trainer.models.batch import response_logprobs, split_rows
from trainer.models.freezing import freeze_by_prefix, freeze_prefixes
from trainer.models.micro_batches import MicroBatching, micro_batch, plan_groups
from trainer.roles.profiling import ProfiledRole
from trainer.train import PROCESS_GROUP_STRATEGIES, OptimConfig, TrainStrategy, build_strategy
from trainer.train.base import ForwardStrategy, max_over_ranks

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
    when lora_target is set (trainer.models.lora). A role that packs sequences attends within each
    sample without a dense mask (trainer.models.packed_attention)."""
    from trainer.models.loading import load_model

    section = role_section(cfg, role)
    args = section.model_args
    attention: str | None = args.attn_implementation
    if section.use_sequence_packing:
        from trainer.models.packed_attention import packing_attention

        attention = packing_attention(attention)
    model = load_model(model_path(cfg, role), dtype=args.dtype, attn_implementation=attention,
                       trust_remote_code=args.trust_remote_code, config_overrides=args.model_config_kwargs)
    # a trained adapter (trainer.models.adapters): merged into the weights, unless this role trains it further
    adapter, field = adapter_source(cfg, role)
    if adapter is not None and not (training and lora.lora_enabled(args)):
        model = adapters.merge_adapter(model, adapter, field)
    if training and not args.disable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if training and lora.lora_enabled(args):
        model = lora.add_lora(model, args)
        if adapter is not None:
            model = adapters.load_adapter(model, adapter, args, field)
    elif training and args.freeze_module_prefix:  # ROLL's partial freezing, without LoRA only (trainer.models.freezing)
        freeze_by_prefix(model, freeze_prefixes(args.freeze_module_prefix), f"{role}.model_args.freeze_module_prefix")
    return model


def adapter_source(cfg: PipelineConfig, role: str) -> tuple[str | None, str]:
    """(the trained adapter folder the role loads, the field that names it): its own
    model_args.adapter_name_or_path; actor_infer serves actor_train's policy, so it takes actor_train's adapter
    when it names none (validation refuses a different one)."""
    own = role_section(cfg, role).model_args.adapter_name_or_path
    if own is None and role == "actor_infer" and cfg.actor_train.model_args.adapter_name_or_path is not None:
        return cfg.actor_train.model_args.adapter_name_or_path, "actor_train.model_args.adapter_name_or_path"
    return own, f"{role}.model_args.adapter_name_or_path"


def lora_served(cfg: PipelineConfig) -> bool:
    """Whether actor_infer's vllm engine serves actor_train's LoRA adapter itself (enable_lora) rather than
    receiving merged weights."""
    options = topology.strategy_config(cfg.actor_infer)
    return lora.lora_enabled(cfg.actor_train.model_args) and isinstance(options, VllmConfig) and options.enable_lora


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


class RoleBase(ProfiledRole):
    """What every role answers: its RNG (each rank its own file, in the role's folder), a ping, and the
    profiler's window (trainer.roles.profiling)."""

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


def micro_batching(cfg: PipelineConfig, role: str, phase: str) -> MicroBatching | None:
    """How the role cuts rows in `phase` ("train": the update's micro-batches, "infer": its forward-only
    passes) when the config asks for more than fixed rows; None (fixed rows) when it does not:

        ROLL  use_dynamic_batching_in_<phase>  max_tokens_per_microbatch_in_<phase>  rows × padded length
              sequence_length_round_in_<phase>
        verl  use_dynamic_bsz                  max_token_len_per_gpu (both phases)    real tokens
        ROLL  use_sequence_packing             sequence_packing_args (algorithm none / load_balance,
                                               max_packed_sequence_length_<train|forward>,
                                               min_num_micro_batches_<train|forward>)
        ROLL  use_remove_padding               fixed rows, each micro-batch's padding columns dropped
    """
    section = role_section(cfg, role)
    if topology.strategy_name(role, section).startswith("megatron"):
        return None  # Megatron runs its own micro-batch schedule (validation warns that the knobs are not built there)
    train = phase == "train"
    rows = section.training_args.per_device_train_batch_size if train else section.infer_batch_size
    spec: dict[str, Any] = {}
    if section.use_dynamic_batching_in_train if train else section.use_dynamic_batching_in_infer:
        name = "max_tokens_per_microbatch_in_train" if train else "max_tokens_per_microbatch_in_infer"
        spec |= {"max_tokens": getattr(section, name), "field": f"{role}.{name}", "cost": "padded",
                 "round_to": section.sequence_length_round_in_train if train else section.sequence_length_round_in_infer}
    elif section.use_dynamic_bsz:
        spec |= {"max_tokens": section.max_token_len_per_gpu, "field": f"{role}.max_token_len_per_gpu", "cost": "real"}
    if section.use_sequence_packing:
        args = section.sequence_packing_args
        spec |= {"pack": True, "balance": args.algorithm == "load_balance"}
        if spec["balance"]:
            name = "max_packed_sequence_length_train" if train else "max_packed_sequence_length_forward"
            spec |= {"max_packed_length": getattr(args, name), "field": f"{role}.sequence_packing_args.{name}",
                     "min_micro_batches": args.min_num_micro_batches_train if train
                     else args.min_num_micro_batches_forward}
    return MicroBatching(rows=rows, **spec) if spec or section.use_remove_padding else None


def forward_in_chunks(fn: Callable[[nn.Module, dict[str, Tensor]], Tensor], strategy: ForwardStrategy,
                      batch: dict[str, Tensor], chunk: int, spec: MicroBatching | None = None) -> Tensor:
    """fn(model, rows) over chunks of `chunk` rows under the strategy's forward_no_grad (which puts
    the rows on the strategy's device); this rank's rows, back on the CPU. With `spec` the chunks are
    cut (and packed) as micro_batching says."""
    rows, own = strategy.join_model_parallel_rows(batch)
    if spec is not None:
        return forward_micro_batches(fn, strategy, rows, spec)[own]
    parts = split_rows(rows, max(1, chunk or rows["response_mask"].size(0)))
    out = [strategy.forward_no_grad(fn, part).detach().cpu() for part in parts]
    return torch.cat(out, dim=0)[own]


def forward_micro_batches(fn: Callable[[nn.Module, dict[str, Tensor]], Tensor], strategy: ForwardStrategy,
                          rows: dict[str, Tensor], spec: MicroBatching) -> Tensor:
    """fn over the micro-batches `spec` cuts, as many on every rank of the process group (a sharded
    model gathers its weights in each forward); each result [b, r ≤ R] written back to its rows,
    zero where the micro-batch's response was cut short (padding, masked downstream). An empty
    micro-batch (a rank with fewer rows than the count) runs its first row and drops the result."""
    groups = plan_groups(rows, spec)
    count = max_over_ranks(len(groups))
    if count != len(groups):
        groups = plan_groups(rows, spec, at_least=count)
    out: Tensor | None = None
    for group in groups:
        result = strategy.forward_no_grad(fn, micro_batch(rows, group or [0], spec)).detach().cpu()
        if not group:
            continue
        if out is None:
            out = result.new_zeros((rows["response_mask"].size(0), rows["response_mask"].size(1), *result.shape[2:]))
        out[torch.tensor(group), : result.size(1)] = result
    assert out is not None
    return out


def logprobs_fn(temperature: float) -> Callable[[nn.Module, dict[str, Tensor]], Tensor]:
    """response_logprobs, or the model's own where it has one (megatron: from the vocab-sharded logits,
    without gathering the vocabulary)."""

    def fn(model: nn.Module, part: dict[str, Tensor]) -> Tensor:
        own = getattr(model, "response_logprobs", None)
        return own(part, temperature) if own is not None else response_logprobs(model, part, temperature)

    return fn
