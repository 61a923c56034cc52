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
from trainer.models.megatron_convert import (
    gpt_layout,
    hf_to_megatron,
    layer_tensors,
    megatron_edges_to_hf,
    megatron_experts_to_hf,
    megatron_layer_to_hf,
    megatron_to_hf,
)
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


# --------------------------------------------------------------------------------------------
# Qwen3-MoE: 4 experts, top-2; one rank, and expert parallelism 2 on two gloo ranks


def test_qwen3_moe_round_trip_at_ep2_gives_back_the_hf_state_dict() -> None:
    model = tiny_causal_lm("qwen3_moe", layers=2)
    hf, layout = model.state_dict(), gpt_layout(model.config)
    assert (layout.num_experts, layout.moe_topk, layout.moe_ffn_hidden_size) == (4, 2, 24)
    ranks = [
        hf_to_megatron(
            hf,
            layout,
            tp_rank=0,
            tp_size=1,
            layers=[0, 1],
            pre_process=True,
            post_process=True,
            ep_rank=ep,
            ep_size=2,
        )
        for ep in range(2)
    ]
    # EP rank 1's local expert 0 is global expert 2: [gate; up] of HF's fused gate_up_proj[2]
    assert torch.equal(
        ranks[1]["decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight"],
        hf["model.layers.0.mlp.experts.gate_up_proj"][2],
    )
    got = megatron_edges_to_hf([ranks[0]], [ranks[0]], layout)
    for index in range(2):
        per_ep = [layer_tensors(r, index) for r in ranks]
        got |= megatron_layer_to_hf(per_ep[:1], index, layout)
        got |= megatron_experts_to_hf([[p] for p in per_ep], index, layout)
    assert_same_state(got, hf)


def test_dense_layers_in_a_qwen3_moe_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="mlp_only_layers"):
        gpt_layout(tiny_causal_lm("qwen3_moe", layers=2, mlp_only_layers=[1]).config)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_qwen3_moe_on_megatron_computes_the_hf_logits_and_weights(
    one_rank: None, norm_topk_prob: bool
) -> None:
    batch = rollout_batch(4, seed=1)
    hf = tiny_causal_lm("qwen3_moe", layers=2, norm_topk_prob=norm_topk_prob)
    strategy = build_forward_strategy(
        "megatron_infer", tiny_causal_lm("qwen3_moe", layers=2, norm_topk_prob=norm_topk_prob)
    )
    assert strategy.config.moe_router_pre_softmax is not norm_topk_prob
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(
        megatron_logits(strategy, batch)[real], hf_logits(hf, batch)[real], rtol=0, atol=2e-5
    )
    assert_same_state(strategy.full_state_dict(), hf.state_dict())


def test_a_qwen3_moe_train_step_is_finite_and_trains_the_router(one_rank: None) -> None:
    batch = rollout_batch(4, seed=2)
    model = tiny_causal_lm("qwen3_moe", layers=2, router_aux_loss_coef=0.01)
    before = model.state_dict()
    strategy = build_strategy("megatron_train", model, SGD)
    assert strategy.config.moe_router_load_balancing_type == "aux_loss"
    assert strategy.config.moe_aux_loss_coeff == 0.01
    metrics = strategy.train_step([batch], nll_loss(float(batch["response_mask"].sum())))
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    after = strategy.full_state_dict()
    for key in ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.experts.gate_up_proj"):
        assert not torch.equal(after[key], before[key]), key


def qwen3_moe_ep2(rank: int, world_size: int, dispatcher: str) -> dict[str, Any]:
    batch = rollout_batch(4, seed=5)
    mine = {k: v.chunk(world_size)[rank] for k, v in batch.items()}
    config = {
        "expert_model_parallel_size": 2,
        "moe_token_dispatcher_type": dispatcher,
        "moe_grouped_gemm": True,
    }
    infer = build_forward_strategy(
        "megatron_infer",
        tiny_causal_lm("qwen3_moe", layers=2),
        rank=rank,
        world_size=world_size,
        strategy_config=config,
    )
    out = {
        "logprobs": forward_in_chunks(logprobs_fn(TEMPERATURE), infer, mine, chunk=2),
        "full": infer.full_state_dict(),
        "local_experts": len(infer.chunks[0].decoder.layers[0].mlp.experts.local_experts),
    }
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    strategy = build_strategy(
        "megatron_train",
        tiny_causal_lm("qwen3_moe", layers=2),
        SGD,
        rank=rank,
        world_size=world_size,
        strategy_config=config,
    )
    out["metrics"] = strategy.train_step([mine], nll_loss(float(batch["response_mask"].sum())))
    out["trained"] = strategy.full_state_dict()
    return out


@pytest.mark.parametrize("dispatcher", ["alltoall", "allgather"])
def test_qwen3_moe_at_ep2_on_two_ranks_equals_the_hf_model(tmp_path: Path, dispatcher: str) -> None:
    ranks = run_ranks(qwen3_moe_ep2, 2, tmp_path, dispatcher)
    batch = rollout_batch(4, seed=5)
    hf = tiny_causal_lm("qwen3_moe", layers=2)
    with torch.no_grad():
        expected = response_logprobs(hf, batch, TEMPERATURE) * batch["response_mask"]
    got = torch.cat([ranks[r]["logprobs"] for r in range(2)]) * batch["response_mask"]
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
    assert [ranks[r]["local_experts"] for r in range(2)] == [2, 2]  # each rank holds half the experts
    assert_same_state(ranks[0]["full"], hf.state_dict())
    assert ranks[1]["full"] == {}
    losses = [ranks[r]["metrics"]["loss"] for r in range(2)]
    assert all(torch.isfinite(torch.tensor(loss)) for loss in losses)
    # both EP ranks' experts trained: rank 0's gathered weights moved for experts 0-1 and 2-3 alike
    moved = (
        (
            ranks[0]["trained"]["model.layers.0.mlp.experts.down_proj"]
            - hf.state_dict()["model.layers.0.mlp.experts.down_proj"]
        )
        .abs()
        .sum((1, 2))
    )
    assert bool((moved > 0).all()), moved


def test_the_moe_keys_reach_megatrons_config() -> None:
    """strategy_config's MoE keys act (they were 'not built' before): EP, expert TP, the dispatcher, the router
    dtype, and the grouped GEMM only where Transformer Engine is installed."""
    from trainer.train.megatron_config import (
        layer_spec_kwargs,
        moe_config_kwargs,
        parse_strategy_config,
    )

    options = parse_strategy_config(
        {
            "expert_model_parallel_size": 2,
            "expert_tensor_parallel_size": 1,
            "moe_token_dispatcher_type": "alltoall",
            "moe_grouped_gemm": True,
            "moe_router_dtype": "fp32",
        }
    )
    layout = gpt_layout(tiny_causal_lm("qwen3_moe", layers=2, router_aux_loss_coef=0.02).config)
    on_gpu = moe_config_kwargs(layout, options, te=True)
    assert {k: on_gpu[k] for k in on_gpu if k != "moe_router_load_balancing_type"} == {
        "num_moe_experts": 4,
        "moe_router_topk": 2,
        "moe_ffn_hidden_size": 24,
        "moe_router_pre_softmax": False,  # norm_topk_prob: softmax over the top-k logits
        "moe_aux_loss_coeff": 0.02,
        "moe_router_dtype": "fp32",
        "moe_token_dispatcher_type": "alltoall",
        "moe_grouped_gemm": True,
        "expert_model_parallel_size": 2,
        "expert_tensor_parallel_size": 1,
    }
    assert on_gpu["moe_router_load_balancing_type"] == "aux_loss"
    assert moe_config_kwargs(layout, options, te=False)["moe_grouped_gemm"] is False  # SequentialMLP
    assert layer_spec_kwargs(layout, options, te=False) == {
        "qk_layernorm": True,
        "num_experts": 4,
        "moe_grouped_gemm": False,
    }
    assert moe_config_kwargs(gpt_layout(tiny_causal_lm("qwen3").config), options, te=True) == {}


def test_attention_lora_on_qwen3_moe_computes_what_peft_computes(one_rank: None) -> None:
    """ROLL's Qwen3-30B-A3B LoRA file adapts the attention (validation refuses expert targets, decision 0054):
    PEFT's adapters on a tiny Qwen3-MoE give the PEFT model's log-probs and PEFT's names back."""
    from trainer.config.schema import ModelArgs
    from trainer.models import lora

    def lora_moe() -> torch.nn.Module:
        torch.manual_seed(3)
        model = lora.add_lora(
            tiny_causal_lm("qwen3_moe", layers=2),
            ModelArgs(
                lora_target="q_proj,k_proj,v_proj,o_proj",
                lora_rank=4,
                lora_alpha=8,
                autocast_adapter_dtype=False,
            ),
        )
        with torch.no_grad():
            for name, param in model.named_parameters():
                if ".lora_B." in name:
                    param.copy_(
                        torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1
                    )
        return model

    batch = rollout_batch(4, seed=1)
    hf = lora_moe()
    strategy = build_strategy("megatron_train", lora_moe(), SGD)
    got = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, batch, chunk=4) * batch["response_mask"]
    with torch.no_grad():
        expected = response_logprobs(hf, batch, TEMPERATURE) * batch["response_mask"]
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-5)
    assert_same_state(strategy.full_state_dict(), hf.state_dict())
