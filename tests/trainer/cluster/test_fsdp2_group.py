"""fsdp2_train over 2 Ray actors (gloo on CPU) equals torch_train in one process."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.cluster.probe_workers import TinyTrainer
from tests.trainer.train.lr_schedules import SAVE_AFTER, WARMUP_COSINE, WARMUP_COSINE_LRS
from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.cluster import LocalWorkerGroup, WorkerGroup, distributed, plan_resource_pools
from trainer.config import PipelineConfig
from trainer.train import build_strategy


def test_two_fsdp2_ranks_match_one_process_and_resume_exactly(ray_session, tmp_path) -> None:
    batch = make_batch(4, 12, torch.Generator().manual_seed(0))
    tokens = count_loss_tokens(batch)
    # One process sees the two ranks' halves as two micro-batches: the same global token-mean loss.
    single = TinyTrainer("actor_train", "torch_train", 0, None, 0, 1)
    expected = single.train_step(batch, tokens, micro_batches=2)
    expected_grads, expected_params = single.full_grads(), single.full_state_dict()

    cfg = PipelineConfig.model_validate({"actor_train": {"device_mapping": [0, 1]}})
    pool = plan_resource_pools(cfg, use_gpu=False)["actor_train"]
    group = WorkerGroup(TinyTrainer, "actor_train", pool, ("fsdp2_train", 0, None), distributed=True)
    try:
        per_rank = group.call_sharded("train_step", batch, global_tokens=tokens)
        grads = group.call_all("full_grads")[0]
        params, others = group.call_all("full_state_dict")

        assert sum(m["loss"] for m in per_rank) == pytest.approx(expected["loss"], rel=1e-5)
        assert [m["grad_norm"] for m in per_rank] == pytest.approx([expected["grad_norm"]] * 2, rel=1e-5)
        assert grads.keys() == expected_grads.keys()
        for name, grad in expected_grads.items():
            # summed over ranks, not averaged: an averaging bug would be off by a factor of 2
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
        assert others == {}  # the full state dict is gathered on rank 0 only
        assert params.keys() == expected_params.keys()
        for name, value in expected_params.items():
            torch.testing.assert_close(params[name], value, rtol=1e-5, atol=1e-6, msg=name)

        # sharded checkpoint (model, optimizer, scheduler, per-rank RNG): step 2 after a reload
        # reproduces step 2 of the uninterrupted run bit for bit
        group.call_all("save", str(tmp_path / "step_1"))
        assert {p.name for p in (tmp_path / "step_1").iterdir()} >= {"dcp", "scheduler.pt", "rng_rank0.pt", "rng_rank1.pt"}
        second = make_batch(4, 12, torch.Generator().manual_seed(1))
        group.call_sharded("train_step", second, global_tokens=count_loss_tokens(second))
        straight = group.call_all("full_state_dict")[0]
        group.call_all("load", str(tmp_path / "step_1"))
        assert all(torch.equal(group.call_all("full_state_dict")[0][k], v) for k, v in params.items())
        group.call_sharded("train_step", second, global_tokens=count_loss_tokens(second))
        resumed = group.call_all("full_state_dict")[0]
        assert all(torch.equal(resumed[k], v) for k, v in straight.items())
        assert not all(torch.equal(straight[k], v) for k, v in params.items())  # step 2 did move

        # HSDP (fsdp_size=1: each rank holds a full replica, gradients all-reduced): also a sum
        group.call_all("rebuild", "fsdp2_train", 0, {"fsdp_size": 1})
        per_rank = group.call_sharded("train_step", batch, global_tokens=tokens)
        assert sum(m["loss"] for m in per_rank) == pytest.approx(expected["loss"], rel=1e-5)
        grads = group.call_all("full_grads")[0]
        for name, grad in expected_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    finally:
        group.shutdown()


def test_fsdp2_in_process_with_bf16_mixed_precision_keeps_fp32_master_weights() -> None:
    batch = make_batch(2, 10, torch.Generator().manual_seed(3))
    tokens = count_loss_tokens(batch)
    expected = TinyTrainer("actor_train", "torch_train", 0, None, 0, 1).train_step(batch, tokens)
    mixed = {"param_dtype": "bf16", "reduce_dtype": "fp32", "reshard_after_forward": False}
    group = LocalWorkerGroup(TinyTrainer, "actor_train", None, ("fsdp2_train", 0, mixed), distributed=True)
    try:
        assert torch.distributed.get_world_size() == 1
        (metrics,) = group.call_sharded("train_step", batch, global_tokens=tokens)
        assert metrics["loss"] == pytest.approx(expected["loss"], rel=2e-2)  # bf16 compute, not equal
        assert metrics["loss"] != expected["loss"]
        assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=5e-2)
        state = group.call_rank0("full_state_dict")
        assert {t.dtype for t in state.values()} == {torch.float32}
    finally:
        group.shutdown()
    assert not torch.distributed.is_initialized()


def test_fsdp2_resume_continues_the_warmup_cosine_schedule(tmp_path) -> None:
    """Saved after 3 of 6 steps and loaded into a fresh strategy (other initial weights), fsdp2_train
    goes on with the LR the uninterrupted run used at steps 4-6, not the schedule's start again, and
    ends on the same weights. One rank in this process (gloo)."""
    batches = [make_batch(2, 10, torch.Generator().manual_seed(s)) for s in range(6)]

    def step(strategy, batch) -> dict:
        return strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))

    distributed.init_process_group(rank=0, world_size=1, master_addr="127.0.0.1",
                                   master_port=distributed.find_free_port())
    try:
        straight = build_strategy("fsdp2_train", tiny_qwen2(0), WARMUP_COSINE)
        straight_lrs = [step(straight, b)["lr"] for b in batches[:SAVE_AFTER]]
        straight.save_checkpoint(tmp_path / "ckpt")  # then goes on uninterrupted
        straight_lrs += [step(straight, b)["lr"] for b in batches[SAVE_AFTER:]]
        expected_params = straight.full_state_dict()

        resumed = build_strategy("fsdp2_train", tiny_qwen2(5), WARMUP_COSINE)
        resumed.load_checkpoint(tmp_path / "ckpt")
        resumed_lrs = [step(resumed, b)["lr"] for b in batches[SAVE_AFTER:]]
        params = resumed.full_state_dict()
    finally:
        distributed.destroy_process_group()

    assert straight_lrs == pytest.approx(WARMUP_COSINE_LRS, abs=1e-12)
    assert resumed_lrs == straight_lrs[SAVE_AFTER:]
    assert params.keys() == expected_params.keys()
    assert all(torch.equal(params[k], v) for k, v in expected_params.items())
