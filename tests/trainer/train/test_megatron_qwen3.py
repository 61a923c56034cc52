"""Qwen3 (dense, q_norm / k_norm as megatron's qk_layernorm) and Qwen3-MoE (megatron-core's own MoE layer:
router, SequentialMLP experts, expert parallelism) on megatron_train / megatron_infer, on CPU with
megatron-core's CUDA calls redirected (tests/trainer/train/megatron_testing.py).

Expected values come from the Hugging Face model itself (its logits, its state dict)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.trainer.train.megatron_testing import (
    emulated_cuda,
    nll_loss,
    rollout_batch,
    run_ranks,
    tiny_causal_lm,
)
from trainer.cluster import distributed
from trainer.models.batch import response_logprobs
from trainer.models.megatron_convert import gpt_layout, hf_to_megatron, megatron_to_hf
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_forward_strategy, build_strategy

pytest.importorskip("megatron.core")

TEMPERATURE = 0.7
SGD = OptimConfig(lr=0.1, optimizer="sgd", max_grad_norm=1.0, num_training_steps=10)


def hf_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits


def megatron_logits(strategy: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return strategy.forward_no_grad(
        lambda m, b: (
            m(
                input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
            ).logits
        ),
        batch,
    )


def assert_same_state(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    assert all(torch.equal(got[k], v) for k, v in expected.items())


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    distributed.init_process_group(
        rank=0, world_size=1, master_addr="127.0.0.1", master_port=distributed.find_free_port()
    )
    try:
        with emulated_cuda():
            yield
    finally:
        distributed.destroy_process_group()


# --------------------------------------------------------------------------------------------
# conversion as pure functions


def test_unsupported_model_types_are_refused_by_name() -> None:
    for model_type in ("qwen3_next", "qwen3_5_moe", "mixtral"):
        with pytest.raises(ValueError, match=model_type):
            gpt_layout(SimpleNamespace(model_type=model_type))


def test_qwen3_round_trip_at_tp2_gives_back_the_hf_state_dict() -> None:
    hf = tiny_causal_lm("qwen3").state_dict()
    layout = gpt_layout(tiny_causal_lm("qwen3").config)
    assert (layout.qk_norm, layout.qkv_bias, layout.head_dim) == (True, False, 16)
    ranks = [
        hf_to_megatron(hf, layout, tp_rank=r, tp_size=2, layers=range(4), pre_process=True, post_process=True)
        for r in range(2)
    ]
    # the norms are per head_dim: every TP rank holds them whole
    for r in range(2):
        assert torch.equal(
            ranks[r]["decoder.layers.1.self_attention.q_layernorm.weight"],
            hf["model.layers.1.self_attn.q_norm.weight"],
        )
    assert_same_state(megatron_to_hf([ranks], [list(range(4))], layout), hf)


# --------------------------------------------------------------------------------------------
# Qwen3 dense: one rank, and TP 2 on two gloo ranks


def test_qwen3_on_megatron_computes_the_hf_logits_and_weights(one_rank: None) -> None:
    batch = rollout_batch(4, seed=1)
    hf = tiny_causal_lm("qwen3")
    strategy = build_forward_strategy("megatron_infer", tiny_causal_lm("qwen3"))
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(
        megatron_logits(strategy, batch)[real], hf_logits(hf, batch)[real], rtol=0, atol=2e-5
    )
    assert_same_state(strategy.full_state_dict(), hf.state_dict())


def qwen3_tp2(rank: int, world_size: int) -> dict[str, Any]:
    batch = rollout_batch(4, seed=5)
    mine = {k: v.chunk(world_size)[rank] for k, v in batch.items()}
    infer = build_forward_strategy(
        "megatron_infer",
        tiny_causal_lm("qwen3"),
        rank=rank,
        world_size=world_size,
        strategy_config={"tensor_model_parallel_size": 2},
    )
    return {
        "logprobs": forward_in_chunks(logprobs_fn(TEMPERATURE), infer, mine, chunk=2),
        "full": infer.full_state_dict(),
    }


def test_qwen3_at_tp2_on_two_ranks_equals_the_hf_model(tmp_path: Path) -> None:
    ranks = run_ranks(qwen3_tp2, 2, tmp_path)
    batch = rollout_batch(4, seed=5)
    hf = tiny_causal_lm("qwen3")
    with torch.no_grad():
        expected = response_logprobs(hf, batch, TEMPERATURE) * batch["response_mask"]
    got = torch.cat([ranks[r]["logprobs"] for r in range(2)]) * batch["response_mask"]
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
    assert_same_state(ranks[0]["full"], hf.state_dict())
    assert ranks[1]["full"] == {}


def test_a_qwen3_train_step_is_finite(one_rank: None) -> None:
    batch = rollout_batch(4, seed=2)
    strategy = build_strategy("megatron_train", tiny_causal_lm("qwen3"), SGD)
    metrics = strategy.train_step([batch], nll_loss(float(batch["response_mask"].sum())))
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
