"""LoRA on megatron_train on one GPU over nccl (decision 0054): with Transformer Engine, linear_qkv and
linear_fc1 fuse the norm before them, so the adapters normalise their input themselves — the path the CPU tests
(megatron-core's local layers) do not reach. Expected values come from PEFT's model and torch_train on the same
GPU. Run on a GPU machine: `pytest -m gpu tests/trainer/train/test_megatron_lora_gpu.py`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.trainer.train.megatron_testing import nll_loss, rollout_batch
from tests.trainer.train.test_megatron_lora import ALL, TEMPERATURE, lora_model
from trainer.cluster import distributed
from trainer.models.batch import response_logprobs
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_strategy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
pytest.importorskip("megatron.core")

ADAMW = OptimConfig(lr=1e-2, optimizer="adamw", eps=1e-3, max_grad_norm=1.0, num_training_steps=10)


@pytest.fixture
def nccl_group() -> Iterator[None]:
    distributed.init_process_group(
        rank=0, world_size=1, master_addr="127.0.0.1", master_port=distributed.find_free_port()
    )
    try:
        yield
    finally:
        distributed.destroy_process_group()


def test_lora_on_the_gpu_computes_peft_trains_like_torch_and_resumes(
    nccl_group: None, tmp_path: Path
) -> None:
    batch = {k: v.cuda() for k, v in rollout_batch(4, seed=7).items()}
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    hf = lora_model(ALL).cuda()
    with torch.no_grad():
        expected_logprobs = response_logprobs(hf, batch, TEMPERATURE) * batch["response_mask"]
    expected = build_strategy("torch_train", hf, ADAMW, device="cuda").train_step([batch], loss_fn)
    strategy = build_strategy("megatron_train", lora_model(ALL), ADAMW, device="cuda")
    got = forward_in_chunks(logprobs_fn(TEMPERATURE), strategy, batch, chunk=4) * batch["response_mask"]
    torch.testing.assert_close(got, expected_logprobs, rtol=0, atol=1e-3)  # GPU kernels, TF32
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-3)
    assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-2)
    strategy.save_checkpoint(tmp_path / "ckpt")
    state = strategy.full_state_dict()
    strategy.train_step([batch], loss_fn)
    strategy.load_checkpoint(tmp_path / "ckpt")
    assert all(torch.equal(strategy.full_state_dict()[k], v) for k, v in state.items())
