"""The CUDA paths of deepspeed_train / deepspeed_infer: one rank over nccl, ZeRO-3 with bf16 and with
CPU offload, against torch_train on the same GPU (DeepSpeed's documented API; run on a GPU machine)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.cluster import distributed
from trainer.config.topology import TrainShape
from trainer.train import OptimConfig, build_forward_strategy, build_strategy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

OPTIM = OptimConfig(lr=1e-2, num_training_steps=4, max_grad_norm=1.0)
SHAPE = TrainShape("actor_train", dp=1, micro_batch=4, grad_accum=1, samples=4, ppo_epochs=1)
ZERO3_BF16 = {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}, "bf16": {"enabled": True}}
ZERO3_OFFLOAD = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                       "offload_param": {"device": "cpu", "pin_memory": True}}}


@pytest.fixture
def nccl_group():
    pytest.importorskip("deepspeed")
    distributed.init_process_group(rank=0, world_size=1, master_addr="127.0.0.1",
                                   master_port=distributed.find_free_port())
    try:
        yield
    finally:
        distributed.destroy_process_group()


@pytest.mark.parametrize(("config", "rel"), [(ZERO3_BF16, 2e-2), (ZERO3_OFFLOAD, 1e-4)])
def test_zero3_on_cuda_matches_torch_train(nccl_group: None, tmp_path, config: dict, rel: float) -> None:
    batch = make_batch(4, 16, torch.Generator().manual_seed(0))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    expected = build_strategy("torch_train", tiny_qwen2(0), OPTIM, device="cuda").train_step([batch], loss_fn)

    strategy = build_strategy("deepspeed_train", tiny_qwen2(0), OPTIM, device="cuda", strategy_config=config,
                              shape=SHAPE)
    assert torch.distributed.get_backend() == "cpu:gloo,cuda:nccl"
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=rel)
    assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=5 * rel)
    state = strategy.full_state_dict()
    assert {t.device.type for t in state.values()} == {"cpu"}
    strategy.save_checkpoint(tmp_path / "ckpt")
    strategy.train_step([batch], loss_fn)
    strategy.load_checkpoint(tmp_path / "ckpt")
    assert all(torch.equal(strategy.full_state_dict()[k], v) for k, v in state.items())


def test_deepspeed_infer_zero3_on_cuda_equals_the_whole_model(nccl_group: None) -> None:
    batch = make_batch(4, 16, torch.Generator().manual_seed(1))
    model = tiny_qwen2(0).cuda().eval()
    with torch.no_grad():
        expected = model(input_ids=batch["input_ids"].cuda(), attention_mask=batch["attention_mask"].cuda()).logits
    sharded = build_forward_strategy("deepspeed_infer", tiny_qwen2(0), device="cuda",
                                     strategy_config={"zero_optimization": {"stage": 3}})
    logits = sharded.forward_no_grad(
        lambda m, b: m(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, batch
    )
    torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
