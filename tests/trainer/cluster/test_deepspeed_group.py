"""deepspeed_train over 2 Ray actors (gloo on CPU, real DeepSpeed) equals torch_train in one process;
its checkpoints resume exactly; deepspeed_infer and fsdp2_infer forward exactly like the whole model.

The expected values come from torch_train on one process, which sees both ranks' rows as
micro-batches of the same global token-mean loss. One group of 2 actors serves the whole module
(DeepSpeed imported, its C++ ops loaded, the gloo group formed once); `build` swaps strategies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.trainer.cluster.deepspeed_probe import OPTIM, ShardedTiny
from tests.trainer.train.lr_schedules import SAVE_AFTER, WARMUP_COSINE, WARMUP_COSINE_LRS
from tests.trainer.train.tiny_qwen import (
    count_loss_tokens,
    make_batch,
    split_rows,
    tiny_qwen2,
    token_mean_loss,
)
from trainer.cluster import WorkerGroup, plan_resource_pools
from trainer.config import PipelineConfig
from trainer.config.presets import DEEPSPEED_PRESETS
from trainer.train import OptimConfig, build_strategy

ROWS_PER_RANK, MICRO_BATCHES = 4, 2


@pytest.fixture(scope="module")
def group(ray_session: None) -> Iterator[WorkerGroup]:
    cfg = PipelineConfig.model_validate({"actor_train": {"device_mapping": [0, 1]}})
    pool = plan_resource_pools(cfg, use_gpu=False)["actor_train"]
    workers = WorkerGroup(ShardedTiny, "actor_train", pool, (), distributed=True)
    try:
        yield workers
    finally:
        workers.shutdown()


def one_process_step(batch: dict[str, torch.Tensor], optim: OptimConfig = OPTIM) -> tuple[dict, dict, dict]:
    """torch_train on one process: (metrics, gradients, parameters after the step)."""
    single = build_strategy("torch_train", tiny_qwen2(0), optim)
    metrics = single.train_step(split_rows(batch, 2 * MICRO_BATCHES), token_mean_loss(count_loss_tokens(batch)))
    grads = {name: p.grad.clone() for name, p in single.model.named_parameters()}
    return metrics, grads, single.full_state_dict()


def without_round_robin(preset: dict) -> dict:
    """DeepSpeed 0.19's safe_get_full_grad cannot map ZeRO-2's round-robin gradient partitions back
    to parameters (a size mismatch): the gradients are read with it off; the shipped preset runs in
    the case marked 'as shipped' (same loss, norm and update)."""
    return {**preset, "zero_optimization": {**preset["zero_optimization"], "round_robin_gradients": False}}


CASES = {  # (strategy_config, read the gradients, activation checkpointing)
    "zero0": (DEEPSPEED_PRESETS["deepspeed_zero"], True, False),
    "zero2": (without_round_robin(DEEPSPEED_PRESETS["deepspeed_zero2"]), True, False),
    "zero2 as shipped": (DEEPSPEED_PRESETS["deepspeed_zero2"], False, False),
    "zero3": (DEEPSPEED_PRESETS["deepspeed_zero3"], True, False),
    "zero3 activation checkpointing": (DEEPSPEED_PRESETS["deepspeed_zero3"], True, True),
    "zero3 cpu offload": (DEEPSPEED_PRESETS["deepspeed_zero3_cpuoffload"], True, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_zero_on_two_ranks_matches_torch_train_on_one(group: WorkerGroup, case: str) -> None:
    preset, read_grads, checkpointing = CASES[case]
    batch = make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(0))
    expected, expected_grads, expected_params = one_process_step(batch)

    group.call_all("build", "deepspeed_train", preset, MICRO_BATCHES, ROWS_PER_RANK, checkpointing=checkpointing)
    settings = group.call_rank0("engine_settings")
    assert settings["checkpointing"] is checkpointing
    stage = preset["zero_optimization"]["stage"]
    offload = case.endswith("offload")
    assert settings["stage"] == stage
    assert settings["overlap_comm"] is preset["zero_optimization"].get("overlap_comm", False)
    assert settings["offload_optimizer"] == settings["offload_param"] == offload
    assert settings["optimizer"] == ("DeepSpeedCPUAdam" if offload else "AdamW")
    # the preset's `auto` values, derived: 2 micro-batches of 2 rows on each of 2 ranks; no clipping
    assert (settings["train_batch_size"], settings["train_micro_batch_size_per_gpu"],
            settings["gradient_accumulation_steps"], settings["gradient_clipping"]) == (8, 2, 2, 0.0)
    assert settings["reduce_bucket_size"] == (32 * 32 if stage == 3 else 5e8)  # h² for `auto`, h = 32
    total = sum(p.numel() for p in tiny_qwen2(0).parameters())
    held = group.call_all("local_numel")
    assert sum(held) == total if stage == 3 else held == [total, total]  # ZeRO-3 splits the weights

    per_rank = group.call_sharded("step", batch, global_tokens=count_loss_tokens(batch),
                                  micro_batches=MICRO_BATCHES, read_grads=read_grads)
    params, others = group.call_all("full_state_dict")

    assert sum(m["loss"] for m in per_rank) == pytest.approx(expected["loss"], rel=1e-5)
    # the norm of the sum over ranks; DeepSpeed's default average would give half of it
    assert [m["grad_norm"] for m in per_rank] == pytest.approx([expected["grad_norm"]] * 2, rel=1e-5)
    assert all(m["update_skipped"] == 0.0 and m["lr"] == expected["lr"] for m in per_rank)
    if read_grads:
        grads = group.call_all("last_grads")[0]
        assert grads.keys() == expected_grads.keys()
        for name, grad in expected_grads.items():
            # the sum over ranks, not DeepSpeed's average: averaging would be off by a factor of 2
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert others == {}  # gathered on rank 0 only
    assert params.keys() == expected_params.keys()
    for name, value in expected_params.items():
        # Adam's first step is lr·g/(|g|+eps): for the ~0 gradients of the attention key biases
        # (softmax ignores a shift) it turns reduction-order rounding into ~1e-5 of the step
        torch.testing.assert_close(params[name], value, rtol=1e-5, atol=2e-5, msg=name)


def test_checkpoint_resumes_exactly_with_schedule_and_clipping(group: WorkerGroup, tmp_path: Path) -> None:
    """ZeRO-3 from a checkpoint after step 1 reproduces step 2 bit for bit; warmup (LR 0 at step 1)
    and clipping act as in torch_train."""
    optim = OptimConfig(lr=1e-2, warmup_steps=1, lr_scheduler_type="linear", num_training_steps=4, max_grad_norm=0.5)
    first, second = (make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(s)) for s in (1, 2))
    single = build_strategy("torch_train", tiny_qwen2(0), optim)
    expected = [single.train_step(split_rows(b, 2), token_mean_loss(count_loss_tokens(b))) for b in (first, second)]

    group.call_all("build", "deepspeed_train", DEEPSPEED_PRESETS["deepspeed_zero3"], 1, ROWS_PER_RANK, optim)
    initial = group.call_all("full_state_dict")[0]
    step_1 = group.call_sharded("train_step", first, global_tokens=count_loss_tokens(first))
    after_1 = group.call_all("full_state_dict")[0]
    assert step_1[0]["lr"] == 0.0 and all(torch.equal(after_1[k], v) for k, v in initial.items())
    group.call_all("save", str(tmp_path / "step_1"))
    assert {p.name for p in (tmp_path / "step_1").iterdir()} >= {"ds", "rng_rank0.pt", "rng_rank1.pt"}

    straight = group.call_sharded("train_step", second, global_tokens=count_loss_tokens(second))
    straight_params = group.call_all("full_state_dict")[0]
    assert straight[0]["lr"] == expected[1]["lr"] == pytest.approx(1e-2)
    assert straight[0]["grad_norm"] == pytest.approx(expected[1]["grad_norm"], rel=1e-5)
    assert straight[0]["grad_norm"] > optim.max_grad_norm  # so the clip acted
    reference = single.full_state_dict()
    for name, value in reference.items():
        torch.testing.assert_close(straight_params[name], value, rtol=1e-5, atol=2e-5, msg=name)

    group.call_all("load", str(tmp_path / "step_1"))
    assert all(torch.equal(group.call_all("full_state_dict")[0][k], v) for k, v in after_1.items())
    resumed = group.call_sharded("train_step", second, global_tokens=count_loss_tokens(second))
    resumed_params = group.call_all("full_state_dict")[0]
    assert resumed == straight
    assert all(torch.equal(resumed_params[k], v) for k, v in straight_params.items())


def test_bf16_mixed_precision_keeps_fp32_master_weights(group: WorkerGroup) -> None:
    batch = make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(3))
    expected, _, _ = one_process_step(batch)
    config = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    group.call_all("build", "deepspeed_train", config, MICRO_BATCHES, ROWS_PER_RANK)
    settings = group.call_rank0("engine_settings")
    assert settings["bf16"] is True and settings["module_dtype"] == "torch.bfloat16"
    per_rank = group.call_sharded("step", batch, global_tokens=count_loss_tokens(batch), micro_batches=MICRO_BATCHES)
    total = sum(m["loss"] for m in per_rank)
    assert total == pytest.approx(expected["loss"], rel=1e-3) and total != expected["loss"]  # bf16 compute
    assert per_rank[0]["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-2)


@pytest.mark.parametrize(("name", "config"), [("deepspeed_infer", DEEPSPEED_PRESETS["deepspeed_zero3"]),
                                              ("deepspeed_infer", {"zero_optimization": {"stage": 2}}),
                                              ("fsdp2_infer", {})])
def test_sharded_forward_equals_the_whole_model(group: WorkerGroup, name: str, config: dict) -> None:
    batch = make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(4))
    model = tiny_qwen2(0).eval()
    with torch.no_grad():
        expected = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    group.call_all("build", name, config)
    logits = torch.cat(group.call_sharded("logits", batch))
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
    state = group.call_all("full_state_dict")[0]
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_full_weights_are_gathered_one_module_at_a_time(group: WorkerGroup) -> None:
    """Weight sync and the HF checkpoint never bring the whole ZeRO-3 model onto a rank at once."""
    group.call_all("build", "deepspeed_train", DEEPSPEED_PRESETS["deepspeed_zero3"], 1, ROWS_PER_RANK)
    sizes = group.call_all("gathered_sizes")[0]
    model = tiny_qwen2(0)
    largest_module = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    assert max(sizes) == largest_module < sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset", ["deepspeed_zero", "deepspeed_zero3"])
def test_a_nan_gradient_skips_the_update_and_the_schedule_advances(group: WorkerGroup, preset: str) -> None:
    """As torch_train: no update from an inf/NaN gradient norm, the LR schedule moves on."""
    optim = OptimConfig(lr=1e-2, warmup_steps=2, lr_scheduler_type="linear", num_training_steps=4, max_grad_norm=1.0)
    batch = make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(5))
    tokens = count_loss_tokens(batch)
    group.call_all("build", "deepspeed_train", DEEPSPEED_PRESETS[preset], 1, ROWS_PER_RANK, optim)
    before = group.call_all("full_state_dict")[0]
    skipped = group.call_sharded("nan_step", batch, global_tokens=tokens)
    assert [m["update_skipped"] for m in skipped] == [1.0, 1.0] and skipped[0]["lr"] == 0.0
    after = group.call_all("full_state_dict")[0]
    assert all(torch.equal(after[k], v) for k, v in before.items())
    applied = group.call_sharded("train_step", batch, global_tokens=tokens)
    assert [m["update_skipped"] for m in applied] == [0.0, 0.0]
    assert applied[0]["lr"] == pytest.approx(5e-3)  # warmup step 1 of 2, not step 0 again


@pytest.mark.parametrize(("optimizer", "preset", "built"), [("sgd", "deepspeed_zero2", "SGD"),
                                                            ("adam", "deepspeed_zero3_cpuoffload", "DeepSpeedCPUAdam")])
def test_training_args_optim_acts_under_deepspeed(group: WorkerGroup, optimizer: str, preset: str, built: str) -> None:
    """SGD's update is the gradient itself (a sum/average mix-up would show at once); Adam with
    weight decay differs from AdamW, so the CPU Adam must run in Adam mode to match torch's Adam."""
    optim = OptimConfig(lr=1e-2, weight_decay=0.1, num_training_steps=4, max_grad_norm=None, optimizer=optimizer)
    batch = make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(6))
    _, _, expected = one_process_step(batch, optim)
    group.call_all("build", "deepspeed_train", DEEPSPEED_PRESETS[preset], MICRO_BATCHES, ROWS_PER_RANK, optim)
    assert group.call_rank0("engine_settings")["optimizer"] == built
    group.call_sharded("step", batch, global_tokens=count_loss_tokens(batch), micro_batches=MICRO_BATCHES,
                       read_grads=False)
    params = group.call_all("full_state_dict")[0]
    for name, value in expected.items():
        torch.testing.assert_close(params[name], value, rtol=1e-5, atol=2e-5, msg=name)


def test_a_fresh_strategy_resumes_the_warmup_cosine_schedule(group: WorkerGroup, tmp_path: Path) -> None:
    """ZeRO-2 on 2 ranks, saved after 3 of 6 steps and loaded into freshly built strategies: steps 4-6
    run at the LRs the uninterrupted run used (its step count restored, not 0 again) and end on the
    same weights."""
    batches = [make_batch(2 * ROWS_PER_RANK, 12, torch.Generator().manual_seed(10 + s)) for s in range(6)]
    preset = DEEPSPEED_PRESETS["deepspeed_zero2"]

    def lrs(steps: list[dict[str, torch.Tensor]]) -> list[float]:
        per_step = [group.call_sharded("train_step", b, global_tokens=count_loss_tokens(b)) for b in steps]
        assert all(per_rank[0]["lr"] == per_rank[1]["lr"] for per_rank in per_step)
        return [per_rank[0]["lr"] for per_rank in per_step]

    group.call_all("build", "deepspeed_train", preset, 1, ROWS_PER_RANK, WARMUP_COSINE)
    straight = lrs(batches[:SAVE_AFTER])
    group.call_all("save", str(tmp_path / "ckpt"))  # then goes on uninterrupted
    straight += lrs(batches[SAVE_AFTER:])
    straight_params = group.call_all("full_state_dict")[0]
    assert straight == pytest.approx(WARMUP_COSINE_LRS, abs=1e-12)

    group.call_all("build", "deepspeed_train", preset, 1, ROWS_PER_RANK, WARMUP_COSINE)  # a resumed process
    group.call_all("load", str(tmp_path / "ckpt"))
    assert lrs(batches[SAVE_AFTER:]) == straight[SAVE_AFTER:]
    resumed_params = group.call_all("full_state_dict")[0]
    assert all(torch.equal(resumed_params[k], v) for k, v in straight_params.items())
