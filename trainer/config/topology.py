"""The shape of a run, computed in one place (the role torchtitan's ParallelDims plays): which roles
run, on which strategy, with how many workers, how much data parallelism, and how one rollout's
samples become mini-batches and optimizer steps. Validation, derived values, Ray placement, the
workers and the loop all read these numbers from here (torch-free).

    samples per rollout   S = rollout_batch_size × num_return_sequences_in_group (agentic: rollout_batch_size)
    data parallel size    dp = world / (TP × PP × CP) for Megatron, world / Ulysses for FSDP2, else world
                          (ParallelDims)
    global train batch    G = per_device_train_batch_size × gradient_accumulation_steps × dp
    rows per mini-batch   per_device_train_batch_size × gradient_accumulation_steps (on each rank)
    optimizer steps       (S // G) × ppo_epochs per rollout (validation requires S % G == 0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainer.config.registries import INFER_STRATEGIES, ROLL_REWARD_WORKERS
from trainer.config.schema import (
    Fsdp2Config,
    MegatronConfig,
    PipelineConfig,
    SglangConfig,
    VllmConfig,
    WorkerConfig,
)


@dataclass(frozen=True)
class RoleSpec:
    """One worker role of the config: its section name (`actor_train`, …), whether it trains (an optimizer
    and a checkpointed strategy), whether its calls compute with torch in the worker process (what the
    profiler sees), and whether the config may leave its section out."""

    name: str
    trains: bool
    computes: bool
    optional: bool


# THE table of worker roles (issue 42): every other list of role names in the trainer reads it. In the
# order the roles are placed and built. `rewards.<name>` reward workers and the driver's `reward` group
# are not sections of this kind.
ROLE_TABLE: tuple[RoleSpec, ...] = (
    RoleSpec("actor_train", trains=True, computes=True, optional=False),
    RoleSpec("actor_infer", trains=False, computes=True, optional=False),
    RoleSpec("reference", trains=False, computes=True, optional=True),
    RoleSpec("critic", trains=True, computes=True, optional=True),
    RoleSpec("validation", trains=False, computes=False, optional=True),
    # ROLL's shared LLM judge (rewards with judge_model_type cluster call it); its sampling is seeded per request
    RoleSpec("reward_model", trains=False, computes=False, optional=True),
)
WORKER_ROLES: tuple[str, ...] = tuple(r.name for r in ROLE_TABLE)  # the config's worker sections
TRAINING_ROLES: tuple[str, ...] = tuple(r.name for r in ROLE_TABLE if r.trains)  # actor_train, critic
COMPUTING_ROLES: tuple[str, ...] = tuple(r.name for r in ROLE_TABLE if r.computes)
OPTIONAL_ROLES: tuple[str, ...] = tuple(r.name for r in ROLE_TABLE if r.optional)  # reference, critic, validation, reward_model


def roles(config: PipelineConfig) -> dict[str, WorkerConfig]:
    """Every configured worker section by its path (`rewards.<name>` for reward workers)."""
    out: dict[str, WorkerConfig] = {"actor_train": config.actor_train, "actor_infer": config.actor_infer}
    for name in OPTIONAL_ROLES:
        worker = getattr(config, name)
        if worker is not None:
            out[name] = worker
    for name, reward in config.rewards.items():
        out[f"rewards.{name}"] = reward
    return out


def cluster_judges(config: PipelineConfig) -> list[str]:
    """The llm_judge rewards that send their prompts to the reward_model group (ROLL's judge_model_type cluster):
    the group is built only when one does."""
    return [name for name, reward in config.rewards.items()
            if "llm_judge" in (reward.reward_type, ROLL_REWARD_WORKERS.get(reward.worker_cls or ""))
            and reward.judge_model_type == "cluster"]


def strategy_name(role: str, worker: WorkerConfig) -> str:
    if worker.strategy_args is not None:
        return worker.strategy_args.strategy_name
    return "torch_train" if role.split(".")[0] in TRAINING_ROLES else "hf_infer"


def strategy_config(worker: WorkerConfig) -> Any:
    return worker.strategy_args.strategy_config if worker.strategy_args is not None else None


def devices_per_worker(role: str, worker: WorkerConfig) -> int:
    """Devices driven by one worker: one inference engine's TP × PP; a training rank drives one."""
    cfg = strategy_config(worker)
    if isinstance(cfg, VllmConfig):
        return cfg.tensor_parallel_size * cfg.pipeline_parallel_size
    if isinstance(cfg, SglangConfig):
        return cfg.tp_size
    if strategy_name(role, worker) in INFER_STRATEGIES:
        return worker.num_gpus_per_worker
    return 1


def world_size(role: str, worker: WorkerConfig) -> int:
    """Workers of the role: device_mapping / devices_per_worker, else world_size, else 1."""
    if worker.device_mapping:
        return max(1, len(worker.device_mapping) // devices_per_worker(role, worker))
    return worker.world_size or 1


@dataclass(frozen=True)
class ParallelDims:
    """How one role's ranks split (the part torchtitan's ParallelDims plays): every rank belongs to one
    data-parallel replica of `model_parallel` ranks that hold one model copy together.

        model_parallel = TP × PP × CP (Megatron) or Ulysses SP (FSDP2), else 1
        dp             = world / model_parallel (at least 1; validation requires it to divide)
    """

    world: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    sp: int = 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp * self.sp

    @property
    def dp(self) -> int:
        return max(1, self.world // self.model_parallel)


def parallel_dims(role: str, worker: WorkerConfig, world: int | None = None) -> ParallelDims:
    """The ParallelDims of `world` ranks of the role (default: the config's world size). Megatron's
    expert parallelism is not divided out: experts shard inside the data-parallel replicas."""
    world = world_size(role, worker) if world is None else world
    cfg = strategy_config(worker)
    if isinstance(cfg, MegatronConfig):
        return ParallelDims(world, tp=cfg.tensor_model_parallel_size, pp=cfg.pipeline_model_parallel_size,
                            cp=cfg.context_parallel_size)
    if isinstance(cfg, Fsdp2Config):
        return ParallelDims(world, sp=cfg.ulysses_sequence_parallel_size)
    return ParallelDims(world)


def dp_size(role: str, worker: WorkerConfig, world: int | None = None) -> int:
    """Data-parallel size of `world` ranks of the role (parallel_dims(...).dp)."""
    return parallel_dims(role, worker, world).dp


def num_nodes(config: PipelineConfig) -> int:
    """num_nodes when set, else enough nodes of num_gpus_per_node for the highest device id (ROLL's rule)."""
    if config.num_nodes is not None:
        return config.num_nodes
    devices = [d for worker in roles(config).values() for d in worker.device_mapping or []]
    return max(devices, default=0) // config.num_gpus_per_node + 1


def duplicate_devices(mapping: Sequence[int]) -> list[int]:
    """Device ids listed more than once (linear in the number of ids)."""
    return sorted(d for d, n in Counter(mapping).items() if n > 1)


@dataclass(frozen=True)
class Lengths:
    """The token bounds of one row (see `lengths`)."""

    prompt: int  # longest prompt (agentic: the first prompt of a trajectory)
    response: int  # longest response (agentic: every reply and observation after the first prompt)
    total: int  # longest prompt + response of one row: what an engine must hold
    trajectory_cap: int | None  # ROLL's agentic cap: prompt + response of one trajectory; None: prompt and response apart


def lengths(config: PipelineConfig) -> Lengths:
    """The length bounds a run plays and trains with (docs/decisions/0055).

    An agentic run (train_env_manager set) whose file sets sequence_length and leaves prompt_length and
    response_length unset is capped the way ROLL's env managers cap it: the whole trajectory, first prompt, every
    reply and every observation, holds at most sequence_length tokens (trainer.pipeline.trajectory). The split the
    batch layout still needs (a left-padded prompt, a right-padded response) is then derived, not guessed: a
    trajectory holds its first prompt and at least one reply token within the cap (ROLL does not generate once the
    input reaches it), so each part is at most sequence_length - 1, and no narrower bound is known before play (the
    first prompt's length depends on the tokenizer and the environment). These are limits, not padded widths: the
    batch pads each part to its longest row (trainer.models.batch). Otherwise prompt_length and response_length
    bound every row apart and sequence_length only has to hold them (checks.data.check_lengths)."""
    cap = config.sequence_length
    capped = (config.train_env_manager is not None and cap is not None
              and not {"prompt_length", "response_length"} & config.model_fields_set)
    if capped and cap is not None:
        return Lengths(cap - 1, cap - 1, cap, cap)
    return Lengths(config.prompt_length, config.response_length, config.prompt_length + config.response_length, None)


def samples_per_rollout(config: PipelineConfig) -> int:
    """rollout_batch_size × num_return_sequences_in_group; the agentic pipeline (train_env_manager set)
    plays rollout_batch_size trajectories, its groups set by train_env_manager.group_size instead."""
    if config.train_env_manager is not None:
        return config.rollout_batch_size
    return config.rollout_batch_size * config.num_return_sequences_in_group


def domain_batch_sizes(probs: Mapping[str, float], batch_size: int) -> dict[str, int]:
    """Prompts of each domain in one batch of `batch_size` (`domain_interleave_probs`), ROLL's rounding
    (RLVRPipeline's domain_batch_size, BatchStratifiedSampler's domain_batch_num), in listed order:

        n_d = int(p_d × batch_size)              every domain but the last (floor, in float arithmetic:
                                                  int(0.29 × 100) = 28, as in ROLL)
        n_last = batch_size − Σ_{d ≠ last} n_d   the last listed domain takes the rest

    e.g. {a: 0.5, b: 0.3, c: 0.2} of 8 → a 4, b 2, c 2; of 10 → 5, 3, 2."""
    sizes: dict[str, int] = {}
    domains = list(probs)
    for i, domain in enumerate(domains):
        last = i == len(domains) - 1
        sizes[domain] = batch_size - sum(sizes.values()) if last else int(probs[domain] * batch_size)
    return sizes


@dataclass(frozen=True)
class TrainShape:
    """How a training role cuts one rollout into optimizer steps."""

    role: str
    dp: int
    micro_batch: int  # per_device_train_batch_size
    grad_accum: int  # gradient_accumulation_steps
    samples: int  # S
    ppo_epochs: int

    @property
    def rows_per_mini_batch(self) -> int:
        """Rows of one optimizer step on one rank."""
        return self.micro_batch * self.grad_accum

    @property
    def global_batch(self) -> int:
        return self.rows_per_mini_batch * self.dp

    @property
    def optimizer_steps_per_rollout(self) -> int:
        return max(1, self.samples // self.global_batch) * self.ppo_epochs

    @property
    def whole(self) -> bool:
        """S is a whole number of global batches (validation's rule)."""
        return self.samples % self.global_batch == 0


def gradient_accumulation(samples_per_step: int, micro_batch: int, dp: int) -> int | None:
    """Micro-batches each rank accumulates for one optimizer step of `samples_per_step` samples:
    samples ÷ (micro_batch × dp), or None where it does not divide (the importers turn that into their
    framework's own refusal)."""
    per_pass = micro_batch * dp
    if per_pass <= 0 or samples_per_step % per_pass:
        return None
    return samples_per_step // per_pass


def train_shape(config: PipelineConfig, role: str, world: int | None = None) -> TrainShape:
    """The TrainShape of `role` with `world` ranks (default: the config's world size; the workers
    pass the world they actually run in, which is 1 on the local backend)."""
    worker = getattr(config, role)
    args = worker.training_args
    return TrainShape(role, dp_size(role, worker, world), args.per_device_train_batch_size,
                      args.gradient_accumulation_steps, samples_per_rollout(config), config.ppo_epochs)


@dataclass(frozen=True)
class RolloutSchedule:
    """How far generation runs ahead of training (rollout_mode, async_generation_ratio, max_staleness).

    Rollout batch j is trained at step j. It may be drawn and generated once the trainer has asked for
    batch j − lookahead, i.e. with weights of policy version ≥ j − 1 − lookahead, so its staleness at
    step j is at most `lookahead`; batches beyond `max_staleness` are dropped or down-weighted.
    `time_shared`: actor_infer and actor_train share devices and take turns, so nothing overlaps."""

    mode: str  # "sync" | "one_step_off" | "async"
    lookahead: int
    max_staleness: int
    time_shared: bool

    @property
    def overlaps(self) -> bool:
        return self.mode != "sync"


def rollout_schedule(config: PipelineConfig) -> RolloutSchedule:
    """The schedule the config asks for; unset rollout_mode follows ROLL's async_generation_ratio
    (0 sync, 1 one_step_off, ≥ 2 async). Validation refuses the incoherent combinations."""
    ratio = int(config.async_generation_ratio)
    mode = config.rollout_mode or ("sync" if ratio == 0 else "one_step_off" if ratio == 1 else "async")
    lookahead = {"sync": 0, "one_step_off": 1}.get(mode, ratio)
    staleness = lookahead if config.max_staleness is None else config.max_staleness
    shared = infer_devices(config) & set(config.actor_train.device_mapping or ())
    return RolloutSchedule(mode, lookahead, staleness, time_shared=bool(shared))


def infer_devices(config: PipelineConfig) -> set[int]:
    """actor_infer's devices: its device_mapping, or actor_train's under colocate_all when unset."""
    own = config.actor_infer.device_mapping
    if not own and config.colocate_all:
        own = config.actor_train.device_mapping
    return set(own or ())
