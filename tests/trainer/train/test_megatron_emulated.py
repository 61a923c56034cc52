"""megatron_train / megatron_infer end to end on CPU, with megatron-core's CUDA calls redirected to the
CPU (tests/trainer/train/megatron_testing.py says exactly which): the model built from converted HF
weights computes the HF model's logits, the strategies' log-probs, values, training step, full weights
and checkpoints equal what the HF model and torch_train give — on one rank, and on two ranks with
tensor (TP 2), pipeline (PP 2) and data parallelism (DP 2, distributed optimizer) over gloo, whose
distributed checkpoints resume exactly.

Expected values come from the HF model itself and from torch_train on one process. The real CUDA path
(kernels, nccl, Transformer Engine, bf16) is tests/trainer/train/test_megatron_gpu.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.train.lr_schedules import SAVE_AFTER, WARMUP_COSINE, WARMUP_COSINE_LRS
from tests.trainer.train.megatron_testing import (
    emulated_cuda,
    nll_loss,
    rollout_batch,
    run_ranks,
    tiny_causal_lm,
)
from trainer.cluster import distributed
from trainer.models.batch import response_logprobs
from trainer.models.value import ValueModel, response_values
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_forward_strategy, build_strategy

pytest.importorskip("megatron.core")

SGD = OptimConfig(lr=0.1, optimizer="sgd", max_grad_norm=1.0, num_training_steps=10)
ADAMW = OptimConfig(
    lr=1e-2, optimizer="adamw", weight_decay=0.01, max_grad_norm=1.0, num_training_steps=10, warmup_steps=2
)
# a first Adam step is ±lr wherever |g| >> eps: a large eps keeps float noise in near-zero gradients
# (summed in another order) from flipping updates, so parameters compare tightly
ADAM_STEADY = OptimConfig(lr=1e-2, optimizer="adamw", eps=1e-3, max_grad_norm=1.0, num_training_steps=10)
TEMPERATURE = 0.7  # nll_loss's default


def value_loss(total_tokens: float):
    def loss_fn(model: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        error = (response_values(model, mb) - 1.0) ** 2 * mb["response_mask"]
        return error.sum() / total_tokens, {}

    return loss_fn


def split(batch: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]


def hf_logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(model, batch, TEMPERATURE) * batch["response_mask"]


def torch_train_step(
    model: torch.nn.Module, micro: list[dict], loss_fn: Any, optim: OptimConfig
) -> tuple[dict, dict]:
    strategy = build_strategy("torch_train", model, optim)
    return strategy.train_step(micro, loss_fn), strategy.full_state_dict()


# --------------------------------------------------------------------------------------------
# one rank, in this process


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    distributed.init_process_group(
        rank=0, world_size=1, master_addr="127.0.0.1", master_port=distributed.find_free_port()
    )
    try:
        with emulated_cuda():
            yield
    finally:
        distributed.destroy_process_group()  # also megatron's parallel state


@pytest.mark.parametrize(("arch", "tied"), [("qwen2", False), ("llama", True)])
def test_the_converted_model_computes_the_hf_logits_and_weights(
    one_rank: None, arch: str, tied: bool
) -> None:
    batch = rollout_batch(4, seed=1)
    hf = tiny_causal_lm(arch, tied=tied)
    with torch.no_grad():
        expected = hf(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits
    strategy = build_forward_strategy("megatron_infer", tiny_causal_lm(arch, tied=tied))
    logits = strategy.forward_no_grad(
        lambda m, b: m(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits,
        batch,
    )
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=0, atol=2e-5)
    state = strategy.full_state_dict()
    assert sorted(state) == sorted(hf.state_dict())
    assert all(torch.equal(state[k], v) for k, v in hf.state_dict().items())
    # vocab-parallel log-probs through the worker's forward path
    got = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, batch, chunk=3) * batch["response_mask"]
    torch.testing.assert_close(got, hf_logprobs(hf, batch), rtol=0, atol=2e-5)


def test_a_train_step_equals_torch_train_and_the_hf_checkpoint_loads(one_rank: None, tmp_path: Path) -> None:
    batch = rollout_batch(4, seed=2)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    micro = split(batch, 2)
    expected, expected_state = torch_train_step(tiny_causal_lm("qwen2"), micro, loss_fn, SGD)
    strategy = build_strategy("megatron_train", tiny_causal_lm("qwen2"), SGD)
    metrics = strategy.train_step(micro, loss_fn)
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert expected["grad_norm"] > 1.0  # the clip acted
    assert (metrics["lr"], metrics["update_skipped"], metrics["tokens"]) == (0.1, 0.0, expected["tokens"])
    state = strategy.full_state_dict()
    for key, value in expected_state.items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=1e-6, msg=key)
    strategy.hf_model.save_pretrained(tmp_path / "hf", state_dict=state)  # what ActorTrainWorker.save_hf does
    reloaded = type(strategy.hf_model).from_pretrained(tmp_path / "hf")
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in state.items())


@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_a_checkpoint_resumes_exactly(one_rank: None, tmp_path: Path, distributed_optimizer: bool) -> None:
    batch = rollout_batch(4, seed=3)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    config = {"use_distributed_optimizer": distributed_optimizer}
    strategy = build_strategy(
        "megatron_train", tiny_causal_lm("llama", tied=True), ADAMW, strategy_config=config
    )
    strategy.train_step([batch], loss_fn)
    strategy.save_checkpoint(tmp_path / "ckpt")
    first = [strategy.train_step([batch], loss_fn) for _ in range(2)]
    after_first = strategy.full_state_dict()
    assert first[0]["lr"] < first[1]["lr"]  # still warming up: the step count matters
    # into the strategy that went on (as the strategy tests of the other backends) and into a fresh one
    # (as a resumed run): loss, gradient norm, LR and the weights after two more steps are the same
    fresh = build_strategy(
        "megatron_train", tiny_causal_lm("llama", tied=True), ADAMW, strategy_config=config
    )
    for resumed in (strategy, fresh):
        resumed.load_checkpoint(tmp_path / "ckpt")
        assert [resumed.train_step([batch], loss_fn) for _ in range(2)] == first
        assert all(torch.equal(after_first[k], v) for k, v in resumed.full_state_dict().items())
    # use_dist_checkpointing: a reference starts from the checkpoint's weights instead of the HF model's
    saved = (tmp_path / "ckpt" / "dist").as_posix()
    reference = build_forward_strategy(
        "megatron_infer",
        tiny_causal_lm("llama", tied=True, seed=9),
        strategy_config={"use_dist_checkpointing": True, "dist_checkpointing_path": saved},
    )
    fresh.load_checkpoint(tmp_path / "ckpt")
    assert all(torch.equal(reference.full_state_dict()[k], v) for k, v in fresh.full_state_dict().items())


def test_a_fresh_strategy_resumes_the_warmup_cosine_schedule(one_rank: None, tmp_path: Path) -> None:
    """Saved after 3 of 6 steps and loaded into a fresh megatron_train (other initial weights): steps 4-6
    run at the LRs of the uninterrupted run, whose LRs are the hand-computed schedule, and end on its
    weights."""
    batches = [rollout_batch(4, seed=20 + s) for s in range(6)]

    def step(strategy: Any, batch: dict[str, torch.Tensor]) -> float:
        return strategy.train_step([batch], nll_loss(float(batch["response_mask"].sum())))["lr"]

    straight = build_strategy("megatron_train", tiny_causal_lm("qwen2"), WARMUP_COSINE)
    straight_lrs = [step(straight, b) for b in batches[:SAVE_AFTER]]
    straight.save_checkpoint(tmp_path / "ckpt")  # then goes on uninterrupted
    straight_lrs += [step(straight, b) for b in batches[SAVE_AFTER:]]
    assert straight_lrs == pytest.approx(WARMUP_COSINE_LRS, abs=1e-12)
    resumed = build_strategy("megatron_train", tiny_causal_lm("qwen2", seed=9), WARMUP_COSINE)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert [step(resumed, b) for b in batches[SAVE_AFTER:]] == straight_lrs[SAVE_AFTER:]
    expected, got = straight.full_state_dict(), resumed.full_state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], v) for k, v in expected.items())


def test_a_critic_computes_the_hf_values_and_trains_like_torch_train(one_rank: None) -> None:
    batch = rollout_batch(4, seed=4)
    critic = ValueModel(tiny_causal_lm("qwen2"))
    with torch.no_grad():
        critic.value_head.weight.normal_(0, 0.1)
        expected_values = response_values(critic, batch)
    fresh = ValueModel(tiny_causal_lm("qwen2"))
    fresh.load_state_dict(critic.state_dict())
    strategy = build_strategy("megatron_train", fresh, SGD)
    values = strategy.forward_no_grad(response_values, batch)
    real = batch["response_mask"].bool()  # (padding positions are never scored)
    torch.testing.assert_close(values[real], expected_values[real], rtol=0, atol=2e-5)
    loss_fn = value_loss(float(batch["response_mask"].sum()))
    expected, expected_state = torch_train_step(critic, [batch], loss_fn, SGD)
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    torch.testing.assert_close(
        strategy.full_state_dict()["value_head.weight"],
        expected_state["value_head.weight"],
        rtol=0,
        atol=1e-6,
    )


# --------------------------------------------------------------------------------------------
# two ranks: TP 2, PP 2, DP 2 (spawned processes over gloo)

LAYOUTS = {  # strategy_config, optimizer
    "tp2": (
        {"tensor_model_parallel_size": 2},
        SGD,
    ),  # sequence parallelism needs Transformer Engine (GPU test)
    "pp2": ({"pipeline_model_parallel_size": 2}, SGD),
    "dp2": ({"use_distributed_optimizer": True}, ADAM_STEADY),  # megatron shards Adam state only
}


def two_rank_case(rank: int, world_size: int, out_dir: str) -> dict[str, Any]:
    """Every layout on this rank, as the workers drive it: each rank is handed its own half of a batch."""
    from megatron.core import parallel_state

    batch = rollout_batch(4, seed=5)
    mine = split(batch, world_size)[rank]
    results: dict[str, Any] = {}
    for name, (layout, optim) in LAYOUTS.items():
        infer = build_forward_strategy(
            "megatron_infer",
            tiny_causal_lm("qwen2"),
            rank=rank,
            world_size=world_size,
            strategy_config=layout,
        )
        logprobs = forward_in_chunks(logprobs_fn(TEMPERATURE), infer, mine, chunk=2)
        full = infer.full_state_dict()
        strategy = build_strategy(
            "megatron_train",
            tiny_causal_lm("qwen2"),
            optim,
            rank=rank,
            world_size=world_size,
            strategy_config=layout,
        )
        rows, _ = strategy.join_model_parallel_rows(mine)  # TP / PP ranks join their halves; DP ranks keep their own
        loss_fn = nll_loss(float(batch["response_mask"].sum()))
        metrics = strategy.train_step(split(rows, 2), loss_fn)
        trained = strategy.full_state_dict()
        strategy.save_checkpoint(Path(out_dir) / name)  # a distributed checkpoint written by both ranks
        going_on = strategy.train_step(split(rows, 2), loss_fn)
        strategy.load_checkpoint(Path(out_dir) / name)
        results[name] = {
            "logprobs": logprobs,
            "full": full,
            "metrics": metrics,
            "rows": len(rows["input_ids"]),
            "trained": trained,
            "resumed": strategy.train_step(split(rows, 2), loss_fn) == going_on,
        }
        parallel_state.destroy_model_parallel()
    return results


def test_tensor_pipeline_and_data_parallel_ranks_equal_one_process(tmp_path: Path) -> None:
    ranks = run_ranks(two_rank_case, 2, tmp_path, str(tmp_path))
    batch = rollout_batch(4, seed=5)
    hf = tiny_causal_lm("qwen2")
    expected_logprobs = hf_logprobs(hf, batch)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    for name, (_, optim) in LAYOUTS.items():
        expected, expected_state = torch_train_step(tiny_causal_lm("qwen2"), split(batch, 2), loss_fn, optim)
        got = torch.cat([ranks[r][name]["logprobs"] for r in range(2)]) * batch["response_mask"]
        torch.testing.assert_close(got, expected_logprobs, rtol=0, atol=2e-5, msg=name)
        assert all(torch.equal(ranks[0][name]["full"][k], v) for k, v in hf.state_dict().items()), name
        assert ranks[1][name]["full"] == {}  # full weights gather on rank 0 only
        metrics = [ranks[r][name]["metrics"] for r in range(2)]
        if name == "dp2":  # each rank trained on its half: their losses add up to the step's loss
            assert [ranks[r][name]["rows"] for r in range(2)] == [2, 2]
            assert metrics[0]["loss"] + metrics[1]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
        else:  # the model-parallel ranks computed on all rows together
            assert [ranks[r][name]["rows"] for r in range(2)] == [4, 4]
            assert metrics[0]["loss"] == metrics[1]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
        assert metrics[0]["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5), name
        assert ranks[0][name]["resumed"] and ranks[1][name]["resumed"], name
        for key, value in expected_state.items():
            torch.testing.assert_close(
                ranks[0][name]["trained"][key], value, rtol=0, atol=1e-6, msg=f"{name} {key}"
            )
