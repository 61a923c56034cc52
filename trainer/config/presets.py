"""DeepSpeed settings PolicyLab owns (torch-free).

Built-in presets, so ROLL files that write `strategy_config: ${deepspeed_zero2}` resolve even when the
`defaults:` files they name are not next to them. Same content as ROLL's examples/config/deepspeed_zero*.yaml
(DeepSpeed's `auto` lets the trainer fill batch and clip values).

The keys PolicyLab derives, so that no fact is set twice (validation and deepspeed_train both check):

    train_micro_batch_size_per_gpu = per_device_train_batch_size
    gradient_accumulation_steps    = gradient_accumulation_steps
    train_batch_size               = micro × accumulation × dp        (TrainShape, trainer.config.topology)
    gradient_clipping              = training_args.max_grad_norm       (0: no clipping)

A strategy_config may leave them out or write `auto`; any other value must equal the derived one.
"""

from __future__ import annotations

from typing import Any

from trainer.config.schema import DeepSpeedConfig
from trainer.config.topology import TrainShape

_COMMON: dict[str, Any] = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_allow_untested_optimizer": True,
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "bf16": {"enabled": "auto"},
}


def _preset(zero: dict[str, Any]) -> dict[str, Any]:
    return {**_COMMON, "zero_optimization": zero}


_ZERO3: dict[str, Any] = {
    "stage": 3,
    "overlap_comm": True,
    "contiguous_gradients": True,
    "sub_group_size": 1e9,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto",
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": True,
}

DEEPSPEED_PRESETS: dict[str, dict[str, Any]] = {
    "deepspeed_zero": _preset({"stage": 0}),
    "deepspeed_zero2": _preset(
        {
            "stage": 2,
            "allgather_partitions": True,
            "allgather_bucket_size": 5e8,
            "overlap_comm": True,
            "reduce_scatter": True,
            "reduce_bucket_size": 5e8,
            "contiguous_gradients": True,
            "round_robin_gradients": True,
        }
    ),
    "deepspeed_zero3": _preset(_ZERO3),
    "deepspeed_zero3_cpuoffload": _preset(
        {
            **_ZERO3,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
        }
    ),
}


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def derived_batch(shape: TrainShape) -> dict[str, int]:
    """DeepSpeed's three batch keys for a training role of this shape (ROLL's rule)."""
    return {
        "train_batch_size": shape.global_batch,
        "train_micro_batch_size_per_gpu": shape.micro_batch,
        "gradient_accumulation_steps": shape.grad_accum,
    }


def derived_clipping(max_grad_norm: float | None) -> float:
    """DeepSpeed's gradient_clipping: training_args.max_grad_norm, 0 (DeepSpeed's "off") when unset."""
    return 0.0 if max_grad_norm is None else float(max_grad_norm)


def owned_key_conflicts(config: DeepSpeedConfig, shape: TrainShape, max_grad_norm: float | None) -> dict[str, str]:
    """{key: why} for every derived key the DeepSpeed config sets to another value than PolicyLab derives."""
    sources = {
        "train_batch_size": f"per_device_train_batch_size × gradient_accumulation_steps × dp = "
        f"{shape.micro_batch} × {shape.grad_accum} × {shape.dp}",
        "train_micro_batch_size_per_gpu": "training_args.per_device_train_batch_size",
        "gradient_accumulation_steps": "training_args.gradient_accumulation_steps",
        "gradient_clipping": "training_args.max_grad_norm (0 when unset)",
    }
    wanted: dict[str, float] = {**derived_batch(shape), "gradient_clipping": derived_clipping(max_grad_norm)}
    conflicts = {}
    for key, value in wanted.items():
        given = getattr(config, key)
        if given is not None and given != "auto" and float(given) != value:
            conflicts[key] = (
                f"{given} disagrees with {sources[key]} = {value:g}; PolicyLab derives it: write auto or leave it out"
            )
    return conflicts
