"""Devices, parallel sizes, batch arithmetic and micro-batching: the checks over the topology."""

from __future__ import annotations

import math

from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.schema import (
    Fsdp2Config,
    MegatronConfig,
    PipelineConfig,
    SglangConfig,
    VllmConfig,
    WorkerConfig,
)
from trainer.config.topology import (
    TRAINING_ROLES,
    devices_per_worker,
    duplicate_devices,
    roles,
    strategy_config,
    strategy_name,
    train_shape,
    world_size,
)


def check_devices(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    capacity = (config.num_nodes or 0) * config.num_gpus_per_node
    for role, worker in roles(config).items():
        path = f"{role}.device_mapping"
        mapping = worker.device_mapping
        kind = role.split(".")[0]
        if mapping is not None:
            if not mapping:
                issues.append(error(path, "is empty; list at least one device id or leave it unset for CPU"))
                continue
            duplicates = duplicate_devices(mapping)
            if duplicates:
                issues.append(error(path, f"lists device(s) {duplicates} more than once"))
            outside = sorted(d for d in set(mapping) if d < 0 or (config.num_nodes and d >= capacity))
            if any(d < 0 for d in outside):
                issues.append(error(path, f"device ids must be >= 0, got {[d for d in outside if d < 0]}"))
            elif outside:
                issues.append(
                    error(
                        path,
                        f"device ids {outside} are outside the cluster: num_nodes × num_gpus_per_node = "
                        f"{config.num_nodes} × {config.num_gpus_per_node} gives ids 0..{capacity - 1}",
                    )
                )
            per_worker = devices_per_worker(kind, worker)
            engine_sized = strategy_name(kind, worker) in ("vllm", "sglang")  # checked with parallel sizes
            if len(mapping) % per_worker and not engine_sized:
                issues.append(
                    error(
                        f"{role}.num_gpus_per_worker",
                        f"{per_worker} devices per worker does not divide the {len(mapping)} devices of "
                        f"device_mapping; use a divisor of {len(mapping)}",
                    )
                )
            elif worker.world_size is not None and worker.world_size != len(mapping) // per_worker:
                issues.append(
                    error(
                        f"{role}.world_size",
                        f"is {worker.world_size} but device_mapping gives {len(mapping) // per_worker} workers "
                        f"({len(mapping)} devices / {per_worker} per worker); remove world_size or make them agree",
                    )
                )
        if (
            kind == "actor_infer"
            and strategy_name(kind, worker) in ("vllm", "sglang")
            and "num_gpus_per_worker" in worker.model_fields_set
            and worker.num_gpus_per_worker != devices_per_worker(kind, worker)
        ):
            issues.append(
                warning(
                    f"{role}.num_gpus_per_worker",
                    f"ignored: an engine uses its parallel size ({devices_per_worker(kind, worker)} devices)",
                )
            )
    return issues


def check_parallel_sizes(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role, worker in roles(config).items():
        kind = role.split(".")[0]
        cfg = strategy_config(worker)
        base = f"{role}.strategy_args.strategy_config"
        world = world_size(kind, worker)
        if isinstance(cfg, MegatronConfig):
            tp, pp, cp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size
            model_parallel = tp * pp * cp
            if world % model_parallel:
                issues.append(
                    error(
                        f"{base}.tensor_model_parallel_size",
                        f"TP × PP × CP = {tp} × {pp} × {cp} = {model_parallel} does not divide the role's "
                        f"{world} devices; use sizes whose product divides {world}",
                    )
                )
            etp = cfg.expert_tensor_parallel_size or tp
            expert_group = cfg.expert_model_parallel_size * etp * pp
            if (cfg.expert_model_parallel_size > 1 or cfg.expert_tensor_parallel_size) and world % expert_group:
                issues.append(
                    error(
                        f"{base}.expert_model_parallel_size",
                        f"EP × expert TP × PP = {cfg.expert_model_parallel_size} × {etp} × {pp} = {expert_group} "
                        f"does not divide the role's {world} devices",
                    )
                )
            if cfg.virtual_pipeline_model_parallel_size is not None and pp == 1:
                issues.append(
                    error(
                        f"{base}.virtual_pipeline_model_parallel_size",
                        "needs pipeline_model_parallel_size > 1; unset it or raise the pipeline size",
                    )
                )
            if cfg.sequence_parallel and tp == 1:
                issues.append(warning(f"{base}.sequence_parallel", "has no effect with tensor_model_parallel_size 1"))
        if isinstance(cfg, VllmConfig | SglangConfig) and worker.device_mapping:
            engine = devices_per_worker(kind, worker)
            field = "tp_size" if isinstance(cfg, SglangConfig) else "tensor_parallel_size"
            if len(worker.device_mapping) % engine:
                issues.append(
                    error(
                        f"{base}.{field}",
                        f"one engine needs {engine} devices, which does not divide the {len(worker.device_mapping)} "
                        "devices of device_mapping",
                    )
                )
        if isinstance(cfg, Fsdp2Config):
            if cfg.fsdp_size > 0 and world % cfg.fsdp_size:
                issues.append(
                    error(f"{base}.fsdp_size", f"{cfg.fsdp_size} does not divide the role's {world} ranks; "
                          "use a divisor or -1")
                )
            if world % cfg.ulysses_sequence_parallel_size:
                issues.append(
                    error(f"{base}.ulysses_sequence_parallel_size",
                          f"{cfg.ulysses_sequence_parallel_size} does not divide the role's {world} ranks")
                )
    return issues


def _nearest_divisor(n: int, target: int, search: int = 100_000) -> int:
    """The divisor of n closest to target (smaller one on ties); bounded work for huge n."""
    for delta in range(search):
        for candidate in (target - delta, target + delta):
            if 1 <= candidate <= n and n % candidate == 0:
                return candidate
    return n


def _small_divisors(n: int, limit: int = 64) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def padded_batch(samples: int, multiple: int) -> int:
    """Rows of an agentic batch of `samples` rows padded by copies to a multiple of `multiple`
    (trainer.pipeline.agentic.padded_rows): ⌈samples ÷ multiple⌉ × multiple, e.g. 128 to 512 → 512."""
    return -(-samples // multiple) * multiple


def agentic_row_multiple(config: PipelineConfig) -> int:
    """What the agentic pipeline pads a batch to a multiple of (AgenticPipeline.rows_multiple): lcm of every
    training role's per_device_train_batch_size × gradient_accumulation_steps × dp and of the workers of the
    sharded roles (reference, actor_train, critic)."""
    multiple = 1
    for role in TRAINING_ROLES:
        if getattr(config, role) is not None:
            multiple = math.lcm(multiple, train_shape(config, role).global_batch)
    for role, worker in roles(config).items():
        if role in ("reference", *TRAINING_ROLES):
            multiple = math.lcm(multiple, world_size(role, worker))
    return multiple


def _agentic_batch_issue(config: PipelineConfig, role: str, samples: int, step: int, head: str) -> ConfigIssue:
    """ROLL's agentic pipeline pads or trims the batch to whole optimizer steps (adjust_batch, batch_adjust_mode);
    copy, its default, is built: the warning says what one step trains."""
    rows = padded_batch(samples, agentic_row_multiple(config))
    if config.batch_adjust_mode != "copy":
        return error("batch_adjust_mode", f"{head}; ROLL's agentic pipeline fixes that with batch_adjust_mode "
                     f"{config.batch_adjust_mode!r}, which is not built in this version of PolicyLab; built: copy "
                     f"(pads the batch with copies of its rows to {rows}); override batch_adjust_mode=copy")
    steps = rows // step * config.ppo_epochs
    return warning(f"{role}.training_args.gradient_accumulation_steps",
                   f"{head}: each step pads the batch with {rows - samples} copies of its rows to {rows} (ROLL's "
                   f"batch_adjust_mode copy), {steps} optimizer step{'s' if steps > 1 else ''} per rollout "
                   "(step-wise env managers count replies, not trajectories)")


def _batch_issue(config: PipelineConfig, role: str, worker: WorkerConfig) -> ConfigIssue | None:
    shape = train_shape(config, role)
    if shape.whole:
        return None
    samples, dp, micro, accum, step = shape.samples, shape.dp, shape.micro_batch, shape.grad_accum, shape.global_batch
    head = (
        f"rollout_batch_size × num_return_sequences_in_group = {config.rollout_batch_size} × "
        f"{config.num_return_sequences_in_group} = {samples} samples per step is not a whole number of optimizer "
        f"steps of per_device_train_batch_size × gradient_accumulation_steps × dp = {micro} × {accum} × {dp} = {step}"
    )
    if config.train_env_manager is not None:
        head = (f"rollout_batch_size = {samples} trajectories per step is not a whole number of optimizer steps of "
                f"per_device_train_batch_size × gradient_accumulation_steps × dp = {micro} × {accum} × {dp} = {step}")
        return _agentic_batch_issue(config, role, samples, step, head)
    path = f"{role}.training_args.gradient_accumulation_steps"
    if samples % (micro * dp) == 0:
        per_rank = samples // (micro * dp)
        best = _nearest_divisor(per_rank, accum)
        steps = per_rank // best
        hint = f"; gradient_accumulation_steps = {best} works ({steps} optimizer step{'s' if steps > 1 else ''} per rollout)"
        if steps > 1:
            hint += f", {per_rank} gives one step per rollout"
        hint += f"; override {path}={best}"
    elif samples % dp == 0:
        path = f"{role}.training_args.per_device_train_batch_size"
        options = _small_divisors(samples // dp)
        hint = f"; per_device_train_batch_size must divide {samples // dp}, e.g. one of {options[-6:]}"
    else:
        path = "rollout_batch_size"
        need = dp // math.gcd(dp, config.num_return_sequences_in_group)
        hint = f"; the data-parallel size {dp} does not divide {samples}: make rollout_batch_size a multiple of {need}"
    return error(path, head + hint)


def check_batch_arithmetic(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for role in TRAINING_ROLES:
        worker = getattr(config, role)
        if worker is not None:
            issue = _batch_issue(config, role, worker)
            if issue is not None:
                issues.append(issue)
    return issues


# the roles whose micro-batches the knobs cut: training (actor_train, critic) and forward-only passes
MICRO_BATCH_PHASES = {"actor_train": ("train", "infer"), "critic": ("train", "infer"), "reference": ("infer",)}
PACKING_ARGS = ("algorithm", "max_packed_sequence_length_train", "max_packed_sequence_length_forward",
                "min_num_micro_batches_train", "min_num_micro_batches_forward")


def check_micro_batching(config: PipelineConfig) -> list[ConfigIssue]:
    """Token-budget micro-batches (ROLL use_dynamic_batching_in_train/infer, verl use_dynamic_bsz) and sequence
    packing (use_sequence_packing) act on actor_train and critic (training and forward passes) and the
    reference (forward passes), on every strategy but Megatron's; each budget must be set with its switch, and
    one role takes one of the two budget spellings (trainer.models.micro_batches)."""
    issues = []
    for role, worker in roles(config).items():
        phases = MICRO_BATCH_PHASES.get(role, ())
        switches = {"use_dynamic_batching_in_train": "train", "use_dynamic_batching_in_infer": "infer",
                    "use_dynamic_bsz": "", "use_sequence_packing": ""}
        acting = {name: bool(phases) and (not phase or phase in phases) for name, phase in switches.items()}
        for name, phase in switches.items():
            if getattr(worker, name) and not acting[name]:
                acts = ", ".join(r for r, p in MICRO_BATCH_PHASES.items() if not phase or phase in p)
                issues.append(warning(f"{role}.{name}", f"no effect on {role}: it cuts the micro-batches of {acts}"))
        if not phases:
            continue
        name = strategy_name(role, worker)
        if name.startswith("megatron"):
            issues += [warning(f"{role}.{knob}", f"not built on {name} (GPU-only Megatron runs its own micro-batch "
                               "schedule): its micro-batches stay fixed rows, with the same gradients; built on "
                               "torch_train, fsdp2_train/infer, deepspeed_train/infer and hf_infer")
                       for knob in switches if getattr(worker, knob)]
            continue
        if worker.use_dynamic_batching_in_train and worker.max_tokens_per_microbatch_in_train <= 0:
            issues.append(error(f"{role}.max_tokens_per_microbatch_in_train", "use_dynamic_batching_in_train needs "
                                "a token budget > 0 (ROLL recommends sequence length × 2 × micro-batch size)"))
        if worker.use_dynamic_batching_in_infer and "infer" in phases and worker.max_tokens_per_microbatch_in_infer is None:
            issues.append(error(f"{role}.max_tokens_per_microbatch_in_infer", "use_dynamic_batching_in_infer needs a "
                                "token budget (rows × padded length of one forward micro-batch)"))
        if worker.use_dynamic_bsz and worker.max_token_len_per_gpu is None:
            issues.append(error(f"{role}.max_token_len_per_gpu", "use_dynamic_bsz needs a token budget per GPU"))
        if worker.use_dynamic_bsz and (worker.use_dynamic_batching_in_train or worker.use_dynamic_batching_in_infer):
            issues.append(error(f"{role}.use_dynamic_bsz", "verl's use_dynamic_bsz and ROLL's "
                                "use_dynamic_batching_in_train/infer both set the token budget; choose one"))
        args = worker.sequence_packing_args
        if not worker.use_sequence_packing:
            issues += [error(f"{role}.sequence_packing_args.{name}", "acts only with use_sequence_packing: true; "
                             "set it, or remove this") for name in PACKING_ARGS
                       if getattr(args, name) != type(args).model_fields[name].default]
        elif args.algorithm == "load_balance":
            for phase, name in (("train", "use_dynamic_batching_in_train"), ("infer", "use_dynamic_batching_in_infer"),
                                ("", "use_dynamic_bsz")):
                if getattr(worker, name) and (not phase or phase in phases):
                    issues.append(error(f"{role}.sequence_packing_args.algorithm", f"load_balance and {name} both "
                                        "choose the micro-batches; use algorithm none (each dynamic batch packed) "
                                        "or turn dynamic batching off"))
    return issues
