"""DeepSpeed's JSON config from a role's `strategy_config` (the schema's DeepSpeedConfig), its
training_args and the topology. Pure functions: nothing here imports DeepSpeed.

Owned keys come from one place each (trainer.config.presets): the three batch keys from TrainShape,
gradient_clipping from training_args.max_grad_norm; a config may only leave them out, write `auto`
or repeat the derived value. Other `auto` values:

    bf16.enabled / fp16.enabled     on when the model's parameters are in that dtype
    reduce_bucket_size              h²        (h = hidden size; the rule of transformers' DeepSpeed
    stage3_prefetch_bucket_size     0.9 h²     integration)
    stage3_param_persistence_threshold 10 h
    any other zero_optimization key DeepSpeed's own default
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from pydantic import ValidationError

from trainer.config.presets import derived_batch, derived_clipping, owned_key_conflicts
from trainer.config.schema import DeepSpeedConfig, PrecisionToggle
from trainer.config.topology import TrainShape

HIDDEN_SIZE_RULES: dict[str, Callable[[int], int]] = {
    "reduce_bucket_size": lambda h: h * h,
    "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
    "stage3_param_persistence_threshold": lambda h: 10 * h,
}
# The schema's DeepSpeed keys passed on as they are (`auto` resolved); the batch keys and
# gradient_clipping are derived, bf16/fp16 `enabled` resolved, and the import-only keys not passed.
ZERO_KEYS = (
    "stage", "offload_optimizer", "offload_param", "overlap_comm", "contiguous_gradients", "allgather_partitions",
    "allgather_bucket_size", "reduce_scatter", "reduce_bucket_size", "round_robin_gradients", "sub_group_size",
    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
    "stage3_max_reuse_distance", "zero_hpz_partition_size",
)
OFFLOAD_KEYS = ("device", "pin_memory", "nvme_path", "buffer_count")
LOSS_SCALE_KEYS = ("loss_scale", "loss_scale_window", "initial_scale_power", "hysteresis", "min_loss_scale")
OTHER_KEYS = ("zero_allow_untested_optimizer", "steps_per_print", "wall_clock_breakdown")
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


def parse_strategy_config(config: Mapping[str, Any] | DeepSpeedConfig | None) -> DeepSpeedConfig:
    """Validate a DeepSpeed JSON (a mapping) by field; unknown keys are errors naming the key."""
    if isinstance(config, DeepSpeedConfig):
        return config
    try:
        return DeepSpeedConfig.model_validate(dict(config or {}))
    except ValidationError as error:
        problems = "; ".join(
            f"strategy_config.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise ValueError(f"DeepSpeed {problems}") from None


def resolve_precision(config: DeepSpeedConfig, param_dtype: torch.dtype) -> str:
    """"bf16", "fp16" (DeepSpeed mixed precision, fp32 master weights) or "fp32" (no DeepSpeed
    precision: the optimizer steps the parameters in their own dtype, as torch_train does)."""
    enabled = [name for name in PRECISIONS if _enabled(getattr(config, name), param_dtype == PRECISIONS[name])]
    if len(enabled) > 1:
        raise ValueError("strategy_config: bf16.enabled and fp16.enabled are both on; turn one off")
    return enabled[0] if enabled else "fp32"


def _enabled(toggle: PrecisionToggle | None, auto: bool) -> bool:
    if toggle is None:
        return False
    return auto if toggle.enabled == "auto" else bool(toggle.enabled)


def zero_section(config: DeepSpeedConfig, hidden_size: int | None, *, train: bool) -> dict[str, Any]:
    """zero_optimization with `auto` resolved. A forward-only role keeps stage 3 (partitioned
    parameters) or runs stage 0: stages 1-2 partition optimizer state and gradients it has none of."""
    zero = config.zero_optimization
    section = {key: getattr(zero, key) for key in ZERO_KEYS if getattr(zero, key) is not None}
    for key in ("offload_optimizer", "offload_param"):
        if key in section:
            section[key] = {k: getattr(section[key], k) for k in OFFLOAD_KEYS if getattr(section[key], k) is not None}
    if not train:
        section.pop("offload_optimizer", None)
        if section["stage"] != 3:
            section = {"stage": 0}
    out: dict[str, Any] = {}
    for key, value in section.items():
        if value == "auto":
            if key in HIDDEN_SIZE_RULES and hidden_size:
                out[key] = HIDDEN_SIZE_RULES[key](hidden_size)
            continue
        out[key] = int(value) if isinstance(value, float) and value.is_integer() else value
    return out


def precision_section(toggle: PrecisionToggle | None, on: bool) -> dict[str, Any]:
    """{"enabled": on} plus the loss-scaling settings given (only fp16 has them: the schema refuses
    them under bf16)."""
    given = [key for key in LOSS_SCALE_KEYS if toggle is not None and getattr(toggle, key) is not None]
    return {"enabled": on, **{key: getattr(toggle, key) for key in given}}


def build_ds_config(
    config: DeepSpeedConfig,
    *,
    precision: str,
    hidden_size: int | None,
    world_size: int,
    shape: TrainShape | None = None,
    max_grad_norm: float | None = None,
) -> dict[str, Any]:
    """The dict for `deepspeed.initialize(config=...)`. `shape` given: a training role (its owned
    keys are checked, then derived); None: forward-only (one sample per micro-batch, no clipping)."""
    train = shape is not None
    if shape is not None:
        if shape.dp != world_size:
            raise ValueError(f"deepspeed_train: the topology's data-parallel size {shape.dp} differs from the "
                             f"{world_size} ranks the role runs on")
        conflicts = owned_key_conflicts(config, shape, max_grad_norm)
        if conflicts:
            raise ValueError("; ".join(f"strategy_config.{key}: {why}" for key, why in conflicts.items()))
        batch = derived_batch(shape)
    else:
        batch = {"train_batch_size": world_size, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}
    ds: dict[str, Any] = {
        **batch,
        "gradient_clipping": derived_clipping(max_grad_norm) if train else 0.0,
        "zero_optimization": zero_section(config, hidden_size, train=train),
        "bf16": precision_section(config.bf16, precision == "bf16"),
        "fp16": precision_section(config.fp16, precision == "fp16"),
    }
    for key in OTHER_KEYS:
        if getattr(config, key) is not None:
            ds[key] = getattr(config, key)
    return ds


def offloads_optimizer(ds_config: Mapping[str, Any]) -> bool:
    return ds_config["zero_optimization"].get("offload_optimizer", {}).get("device", "none") != "none"
