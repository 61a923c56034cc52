"""DeepSpeed's JSON from our schema (no DeepSpeed import): ROLL's presets validate by field, the batch
keys and clipping are derived from the topology and training_args and never set twice, `auto`
resolves by the documented rules, and validation reports conflicts at the key's path."""

from __future__ import annotations

import pytest
import torch

from trainer.config import validate_config
from trainer.config.presets import DEEPSPEED_PRESETS
from trainer.config.registries import BUILT_STRATEGIES, FORWARD_STRATEGIES, TRAIN_STRATEGIES
from trainer.config.schema import (
    DeepSpeedConfig,
    Fsdp2Config,
    OffloadConfig,
    PrecisionToggle,
    ZeroOptimization,
    field_status,
)
from trainer.config.topology import TrainShape
from trainer.train import FORWARD_STRATEGIES as BUILT_FORWARD
from trainer.train import STRATEGIES
from trainer.train.deepspeed_config import (
    LOSS_SCALE_KEYS,
    OFFLOAD_KEYS,
    OTHER_KEYS,
    ZERO_KEYS,
    build_ds_config,
    parse_strategy_config,
    resolve_precision,
)

SHAPE = TrainShape("actor_train", dp=2, micro_batch=4, grad_accum=3, samples=96, ppo_epochs=1)
HIDDEN = 32


def train_config(config: dict, max_grad_norm: float | None = 1.0, precision: str = "fp32") -> dict:
    return build_ds_config(parse_strategy_config(config), precision=precision, hidden_size=HIDDEN, world_size=2,
                           shape=SHAPE, max_grad_norm=max_grad_norm)


@pytest.mark.parametrize("name", sorted(DEEPSPEED_PRESETS))
def test_roll_presets_become_deepspeed_configs_with_derived_batch_and_clip(name: str) -> None:
    ds = train_config(DEEPSPEED_PRESETS[name])
    # 4 rows × 3 micro-batches × 2 ranks; clip = training_args.max_grad_norm
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (24, 4, 3)
    assert ds["gradient_clipping"] == 1.0
    assert ds["bf16"] == {"enabled": False}  # `auto` follows the fp32 model
    assert ds["fp16"] == {"enabled": False, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                          "hysteresis": 2, "min_loss_scale": 1}
    zero = ds["zero_optimization"]
    assert zero["stage"] == DEEPSPEED_PRESETS[name]["zero_optimization"]["stage"]
    assert "stage3_gather_16bit_weights_on_model_save" not in zero  # import-only: we always gather
    assert "auto" not in str(ds)
    if zero["stage"] == 3:
        # transformers' rules for `auto`, h = 32: h², 0.9 h², 10 h; explicit values kept (as ints)
        assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
                zero["stage3_param_persistence_threshold"]) == (1024, 921, 320)
        assert zero["stage3_max_live_parameters"] == 1_000_000_000
    if name.endswith("cpuoffload"):
        assert zero["offload_optimizer"] == zero["offload_param"] == {"device": "cpu", "pin_memory": True}


def test_unknown_keys_are_errors_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"strategy_config\.zero_optimization\.stage3_bogus"):
        parse_strategy_config({"zero_optimization": {"stage": 3, "stage3_bogus": 1}})
    with pytest.raises(ValueError, match=r"strategy_config\.optimizer"):
        parse_strategy_config({"optimizer": {"type": "AdamW"}})
    with pytest.raises(ValueError, match=r"offload_param needs stage 3"):
        parse_strategy_config({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})
    with pytest.raises(ValueError, match=r"offload_optimizer needs stage 1, 2 or 3"):
        parse_strategy_config({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})
    with pytest.raises(ValueError, match=r"bf16\.loss_scale"):
        parse_strategy_config({"bf16": {"enabled": True, "loss_scale": 0}})


@pytest.mark.parametrize(("key", "value"), [("train_batch_size", 32), ("train_micro_batch_size_per_gpu", 2),
                                            ("gradient_accumulation_steps", 1), ("gradient_clipping", 0.5)])
def test_owned_keys_are_never_set_twice(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"strategy_config\.{key}: {value} disagrees with .*write auto"):
        train_config({key: value})
    derived = {"train_batch_size": 24, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3,
               "gradient_clipping": 1.0}
    assert train_config({key: derived[key]})[key] == derived[key]  # repeating the derived value is fine


def test_clipping_off_and_explicit_precision_and_passthrough() -> None:
    ds = train_config({"bf16": {"enabled": True}, "steps_per_print": 7,
                       "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}},
                      max_grad_norm=None, precision="bf16")
    assert ds["gradient_clipping"] == 0.0 and ds["bf16"] == {"enabled": True} and ds["steps_per_print"] == 7
    assert ds["zero_optimization"] == {"stage": 1, "offload_optimizer": {"device": "nvme", "pin_memory": False,
                                                                         "nvme_path": "/x"}}


def test_precision_follows_the_model_dtype_when_auto() -> None:
    auto = parse_strategy_config(DEEPSPEED_PRESETS["deepspeed_zero2"])  # bf16 and fp16: enabled auto
    assert resolve_precision(auto, torch.float32) == "fp32"
    assert resolve_precision(auto, torch.bfloat16) == "bf16"
    assert resolve_precision(auto, torch.float16) == "fp16"
    assert resolve_precision(parse_strategy_config({}), torch.bfloat16) == "fp32"  # no section: off
    assert resolve_precision(parse_strategy_config({"bf16": {"enabled": True}}), torch.float32) == "bf16"
    with pytest.raises(ValueError, match="both on"):
        resolve_precision(parse_strategy_config({"bf16": {"enabled": True}, "fp16": {"enabled": True}}),
                          torch.float32)


def test_forward_only_roles_keep_stage_3_partitions_and_drop_training_state() -> None:
    def infer(config: dict) -> dict:
        return build_ds_config(parse_strategy_config(config), precision="fp32", hidden_size=HIDDEN, world_size=2)

    offload = infer(DEEPSPEED_PRESETS["deepspeed_zero3_cpuoffload"])
    assert (offload["train_batch_size"], offload["train_micro_batch_size_per_gpu"],
            offload["gradient_accumulation_steps"], offload["gradient_clipping"]) == (2, 1, 1, 0.0)
    assert offload["zero_optimization"]["stage"] == 3 and "offload_optimizer" not in offload["zero_optimization"]
    assert offload["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert infer(DEEPSPEED_PRESETS["deepspeed_zero2"])["zero_optimization"] == {"stage": 0}


def test_validation_reports_owned_key_conflicts_at_the_key() -> None:
    config = {"rollout_batch_size": 8, "num_return_sequences_in_group": 2,
              "actor_train": {"device_mapping": [0, 1], "training_args": {"per_device_train_batch_size": 4},
                              "strategy_args": {"strategy_name": "deepspeed_train",
                                                "strategy_config": {**DEEPSPEED_PRESETS["deepspeed_zero3"],
                                                                    "train_batch_size": 4}}}}
    errors = {issue.path: issue.message for issue in validate_config(config).errors}
    assert "disagrees with per_device_train_batch_size × gradient_accumulation_steps × dp = 4 × 1 × 2 = 8" in (
        errors["actor_train.strategy_args.strategy_config.train_batch_size"])
    config["actor_train"]["strategy_args"]["strategy_config"]["train_batch_size"] = 8
    assert not [i for i in validate_config(config).errors if "strategy_config" in i.path]


def test_field_status_and_strategy_lists_are_true() -> None:
    inactive = {(ZeroOptimization, "stage3_gather_16bit_weights_on_model_save")}
    for model in (DeepSpeedConfig, ZeroOptimization, OffloadConfig, PrecisionToggle):
        for name in model.model_fields:
            status, _ = field_status(model, name)
            assert (status == "import_only") == ((model, name) in inactive), f"{model.__name__}.{name}: {status}"
    assert field_status(Fsdp2Config, "ulysses_sequence_parallel_size")[0] == "planned"
    assert {"deepspeed_train", "deepspeed_infer", "fsdp2_infer"} <= BUILT_STRATEGIES
    assert set(STRATEGIES) == set(TRAIN_STRATEGIES) & BUILT_STRATEGIES
    assert set(BUILT_FORWARD) == set(FORWARD_STRATEGIES) & BUILT_STRATEGIES


def test_every_acting_deepspeed_field_is_passed_on_or_derived() -> None:
    def acting(model: type) -> set[str]:
        return {name for name in model.model_fields if field_status(model, name)[0] == "acts"}

    derived = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
               "gradient_clipping", "zero_optimization", "bf16", "fp16"}
    assert acting(DeepSpeedConfig) == derived | set(OTHER_KEYS)
    assert acting(ZeroOptimization) == set(ZERO_KEYS)
    assert acting(OffloadConfig) == set(OFFLOAD_KEYS)
    assert acting(PrecisionToggle) == {"enabled", *LOSS_SCALE_KEYS}


def test_a_killed_builds_lock_is_cleared_and_a_live_builds_is_kept(tmp_path) -> None:
    """A killed op build leaves torch's `lock` file and every later load waits on it forever (it hung scripts/setup.sh
    for 25 minutes here); only a lock older than any real build is removed."""
    import os
    import time

    from trainer.train.deepspeed_strategy import STALE_BUILD_LOCK_S, clear_stale_build_locks

    dead, live = tmp_path / "deepspeed_shm_comm" / "lock", tmp_path / "cpu_adam" / "lock"
    for lock in (dead, live):
        lock.parent.mkdir()
        lock.touch()
    old = time.time() - STALE_BUILD_LOCK_S - 60
    os.utime(dead, (old, old))
    assert clear_stale_build_locks(tmp_path) == [dead]
    assert not dead.exists() and live.exists()
