"""The CUDA paths: torch_train on a GPU and fsdp2_train over nccl (one rank, bf16 mixed precision)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.cluster import distributed
from trainer.train import OptimConfig, build_strategy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

OPTIM = OptimConfig(lr=1e-2, num_training_steps=4, max_grad_norm=1.0)


def test_fsdp2_over_nccl_matches_torch_train_on_the_gpu(tmp_path) -> None:
    batch = make_batch(4, 16, torch.Generator().manual_seed(0))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    single = build_strategy("torch_train", tiny_qwen2(0), OPTIM, device="cuda")
    expected = single.train_step([batch], loss_fn)
    assert next(single.model.parameters()).is_cuda

    distributed.init_process_group(rank=0, world_size=1, master_addr="127.0.0.1", master_port=distributed.find_free_port())
    try:
        assert torch.distributed.get_backend() == "cpu:gloo,cuda:nccl"
        fsdp = build_strategy("fsdp2_train", tiny_qwen2(0), OPTIM, device="cuda", strategy_config={"param_dtype": "bf16"})
        metrics = fsdp.train_step([batch], loss_fn)
        assert metrics["loss"] == pytest.approx(expected["loss"], rel=2e-2)
        assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=5e-2)
        state = fsdp.full_state_dict()
        assert {t.device.type for t in state.values()} == {"cpu"}
        assert {t.dtype for t in state.values()} == {torch.float32}
        fsdp.save_checkpoint(tmp_path / "ckpt")
        fsdp.train_step([batch], loss_fn)
        fsdp.load_checkpoint(tmp_path / "ckpt")
        assert all(torch.equal(fsdp.full_state_dict()[k], v) for k, v in state.items())
    finally:
        distributed.destroy_process_group()


def test_torch_train_mixed_precision_on_cuda_uses_fused_adamw_and_bf16_autocast() -> None:
    batch = make_batch(4, 16, torch.Generator().manual_seed(1))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    strategy = build_strategy("torch_train", tiny_qwen2(0).to(torch.bfloat16), OPTIM, device="cuda")
    assert strategy.optimizer.defaults["fused"] is True
    assert {p.dtype for p in strategy.model.parameters()} == {torch.float32}  # master weights
    first = strategy.train_step([batch], loss_fn)["loss"]
    logits = strategy.forward_no_grad(lambda m, b: m(input_ids=b["input_ids"]).logits, batch)  # CPU rows in
    assert logits.is_cuda and logits.dtype == torch.bfloat16
    assert strategy.train_step([batch], loss_fn)["loss"] < first


def test_in_process_weight_sync_stays_on_the_gpu_in_the_engines_dtype() -> None:
    from trainer.rollout.hf import HFInferEngine

    strategy = build_strategy("torch_train", tiny_qwen2(0), OPTIM, device="cuda")
    engine = HFInferEngine(tiny_qwen2(1).to(torch.bfloat16), eos_token_ids=[0], pad_token_id=0, device="cuda")
    sent = []
    for bucket in strategy.full_weights(device="cuda:0", dtype=torch.bfloat16, bucket_bytes=4096):
        sent.append(bucket)
        assert {t.device.type for t in bucket.values()} == {"cuda"}
        assert {t.dtype for t in bucket.values() if t.is_floating_point()} == {torch.bfloat16}
        engine.load_weights(bucket)
    assert len(sent) > 1
    for name, value in strategy.model.state_dict().items():
        assert torch.equal(engine.model.state_dict()[name], value.to(torch.bfloat16)), name
