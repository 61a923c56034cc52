"""LoRA on megatron_train (trainer.train.megatron_lora, decision 0054) on CPU, megatron-core's CUDA calls
redirected (tests/trainer/train/megatron_testing.py): PEFT's adapters move onto megatron's linear layers and
compute what PEFT computes on the HF model, only they train (a step equals torch_train's LoRA step), the
merged weights the engine receives are W + scaling · B @ A and give the trained model's log-probs, and a
checkpoint resumes the adapters exactly; on two gloo ranks TP 2 (B of column layers, A of row layers sharded) and
PP 2 equal one process. Sequence parallelism and Transformer Engine's fused norm need a GPU (decision 0054)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
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
from trainer.config.schema import ModelArgs
from trainer.models import adapters, lora
from trainer.models.batch import response_logprobs
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_strategy

pytest.importorskip("megatron.core")

SGD = OptimConfig(lr=0.5, optimizer="sgd", max_grad_norm=None, num_training_steps=10)
ADAMW = OptimConfig(lr=1e-2, optimizer="adamw", eps=1e-3, max_grad_norm=1.0, num_training_steps=10)
TEMPERATURE = 0.7  # nll_loss's default
ALL = "all-linear"


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


def lora_model(target: str, *, layers: int = 2) -> torch.nn.Module:
    """The tiny Qwen2 with PEFT's adapters (rank 4, alpha 8: scaling 2), B off zero so they act from the start."""
    torch.manual_seed(3)
    model = lora.add_lora(
        tiny_causal_lm("qwen2", layers=layers),
        ModelArgs(lora_target=target, lora_rank=4, lora_alpha=8, autocast_adapter_dtype=False),
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(
                    torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1
                )
    return model


def logprobs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(model, batch, TEMPERATURE) * batch["response_mask"]


@pytest.mark.parametrize("target", [ALL, "q_proj,v_proj,down_proj"])
def test_adapters_compute_what_peft_computes_and_only_they_train(one_rank: None, target: str) -> None:
    batch = rollout_batch(4, seed=1)
    hf = lora_model(target)
    strategy = build_strategy("megatron_train", lora_model(target), SGD)
    # the fused qkv / fc1 layers add each projection's B @ A to its own rows only (a partial target too)
    got = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, batch, chunk=4) * batch["response_mask"]
    torch.testing.assert_close(got, logprobs(hf, batch), rtol=0, atol=2e-5)
    trainable = [n for c in strategy.chunks for n, p in c.named_parameters() if p.requires_grad]
    assert trainable and all(".lora." in n for n in trainable)
    assert sum(
        p.numel() for c in strategy.chunks for p in c.parameters() if p.requires_grad
    ) == lora.trainable_count(hf)

    before = strategy.full_state_dict()
    assert sorted(before) == sorted(hf.state_dict())  # PEFT's names: base_layer, lora_A/B.default
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    expected = build_strategy("torch_train", hf, SGD)
    want = expected.train_step([batch], loss_fn)
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["loss"] == pytest.approx(want["loss"], rel=1e-6)
    assert metrics["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
    after, reference = strategy.full_state_dict(), expected.full_state_dict()
    for key, value in after.items():
        torch.testing.assert_close(value, reference[key], rtol=0, atol=1e-6, msg=key)
        assert torch.equal(value, before[key]) != (".lora_" in key), key  # adapters moved, nothing else did


def test_the_engine_gets_the_merged_weights_and_the_trained_log_probs(one_rank: None, tmp_path: Path) -> None:
    batch = rollout_batch(4, seed=2)
    strategy = build_strategy("megatron_train", lora_model(ALL), SGD)
    strategy.train_step([batch], nll_loss(float(batch["response_mask"].sum())))
    trained = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, batch, chunk=4) * batch["response_mask"]
    state = strategy.full_state_dict()
    merged = lora.merged_state_dict(state, 2.0)  # what ActorTrainWorker.full_state_dict hands the engine
    engine = tiny_causal_lm("qwen2", layers=2, seed=11)  # other weights: everything must come from the sync
    assert sorted(merged) == sorted(engine.state_dict())
    module = "model.layers.1.self_attn.k_proj"
    by_hand = state[f"{module}.base_layer.weight"] + 2.0 * (
        state[f"{module}.lora_B.default.weight"] @ state[f"{module}.lora_A.default.weight"]
    )
    torch.testing.assert_close(merged[f"{module}.weight"], by_hand, rtol=0, atol=1e-6)
    engine.load_state_dict(merged)
    torch.testing.assert_close(logprobs(engine, batch), trained, rtol=0, atol=1e-5)
    # the checkpoint's PEFT folder (ActorTrainWorker.save_hf), loaded over the base model by adapter_name_or_path
    folder = adapters.save_adapter(
        tmp_path / "lora_adapter", state, ModelArgs(lora_rank=4, lora_alpha=8), None
    )
    base = tiny_causal_lm("qwen2", layers=2)
    reloaded = adapters.merge_adapter(base, str(folder), "actor_train.model_args.adapter_name_or_path")
    torch.testing.assert_close(logprobs(reloaded, batch), trained, rtol=0, atol=1e-5)


@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_a_checkpoint_resumes_the_adapters_exactly(
    one_rank: None, tmp_path: Path, distributed_optimizer: bool
) -> None:
    batch = rollout_batch(4, seed=3)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    config = {"use_distributed_optimizer": distributed_optimizer}
    strategy = build_strategy("megatron_train", lora_model(ALL), ADAMW, strategy_config=config)
    strategy.train_step([batch], loss_fn)
    strategy.save_checkpoint(tmp_path / "ckpt")
    first = [strategy.train_step([batch], loss_fn) for _ in range(2)]
    after = strategy.full_state_dict()
    fresh_model = lora_model(ALL)
    with torch.no_grad():  # other adapters: the checkpoint must bring them
        for name, param in fresh_model.named_parameters():
            if ".lora_" in name:
                param.add_(1.0)
    fresh = build_strategy("megatron_train", fresh_model, ADAMW, strategy_config=config)
    fresh.load_checkpoint(tmp_path / "ckpt")
    assert [fresh.train_step([batch], loss_fn) for _ in range(2)] == first
    assert all(torch.equal(after[k], v) for k, v in fresh.full_state_dict().items())


def test_adapters_stay_float32_under_a_bf16_model_as_peft_keeps_them(one_rank: None) -> None:
    batch = rollout_batch(4, seed=4)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))

    def bf16_lora() -> torch.nn.Module:
        torch.manual_seed(3)
        args = ModelArgs(lora_target=ALL, lora_rank=4, lora_alpha=8)  # autocast_adapter_dtype: true (default)
        return lora.add_lora(tiny_causal_lm("qwen2", layers=2).to(torch.bfloat16), args)

    expected = build_strategy("torch_train", bf16_lora(), SGD).train_step([batch], loss_fn)
    strategy = build_strategy("megatron_train", bf16_lora(), SGD)
    adapters_ = {n: p for c in strategy.chunks for n, p in c.named_parameters() if ".lora." in n}
    assert adapters_ and {p.dtype for p in adapters_.values()} == {torch.float32}
    before = {n: p.detach().clone() for n, p in adapters_.items()}
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=2e-2)  # bf16 kernels differ
    assert all(not torch.equal(p, before[n]) for n, p in adapters_.items() if ".b." in n)


def test_a_module_megatron_lora_does_not_adapt_is_refused_naming_the_override(one_rank: None) -> None:
    with pytest.raises(ValueError, match=r"lm_head.*override actor_train\.model_args\.lora_target=q_proj"):
        build_strategy("megatron_train", lora_model("q_proj,lm_head"), SGD)


# --------------------------------------------------------------------------------------------
# two ranks (spawned processes over gloo): TP 2 shards B of the column layers and A of the row layers

TWO_RANK_LAYOUTS = {"tp2": {"tensor_model_parallel_size": 2}, "pp2": {"pipeline_model_parallel_size": 2}}


def two_rank_lora_case(rank: int, world_size: int, out_dir: str) -> dict[str, Any]:
    from megatron.core import parallel_state

    batch = rollout_batch(4, seed=5)
    mine = {k: v.chunk(world_size)[rank] for k, v in batch.items()}
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    results: dict[str, Any] = {}
    for name, layout in TWO_RANK_LAYOUTS.items():
        strategy = build_strategy(
            "megatron_train", lora_model(ALL), SGD, rank=rank, world_size=world_size, strategy_config=layout
        )
        rows, _ = strategy.join_model_parallel_rows(mine)
        logprobs = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, mine, chunk=2)
        metrics = strategy.train_step([rows], loss_fn)
        trained = strategy.full_state_dict()
        strategy.save_checkpoint(Path(out_dir) / name)
        going_on = strategy.train_step([rows], loss_fn)
        strategy.load_checkpoint(Path(out_dir) / name)
        resumed = strategy.train_step([rows], loss_fn) == going_on
        results[name] = {"logprobs": logprobs, "metrics": metrics, "trained": trained, "resumed": resumed}
        parallel_state.destroy_model_parallel()
    return results


def test_tensor_and_pipeline_parallel_adapters_equal_one_process(tmp_path: Path) -> None:
    ranks = run_ranks(two_rank_lora_case, 2, tmp_path, str(tmp_path))
    batch = rollout_batch(4, seed=5)
    hf = lora_model(ALL)
    expected_logprobs = logprobs(hf, batch)
    expected = build_strategy("torch_train", hf, SGD)
    want = expected.train_step([batch], nll_loss(float(batch["response_mask"].sum())))
    reference = expected.full_state_dict()
    for name in TWO_RANK_LAYOUTS:
        got = torch.cat([ranks[r][name]["logprobs"] for r in range(2)]) * batch["response_mask"]
        torch.testing.assert_close(got, expected_logprobs, rtol=0, atol=2e-5, msg=name)
        assert ranks[0][name]["metrics"]["loss"] == pytest.approx(want["loss"], rel=1e-6), name
        assert ranks[0][name]["metrics"]["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5), name
        assert sorted(ranks[0][name]["trained"]) == sorted(reference) and ranks[1][name]["trained"] == {}
        for key, value in reference.items():
            torch.testing.assert_close(
                ranks[0][name]["trained"][key], value, rtol=0, atol=1e-6, msg=f"{name} {key}"
            )
        assert ranks[0][name]["resumed"] and ranks[1][name]["resumed"], name
