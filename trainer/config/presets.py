"""Built-in DeepSpeed presets, so ROLL files that write `strategy_config: ${deepspeed_zero2}` resolve
even when the `defaults:` files they name are not next to them. Same content as ROLL's
examples/config/deepspeed_zero*.yaml (DeepSpeed's `auto` lets the trainer fill batch and clip values).
"""

from __future__ import annotations

from typing import Any

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
