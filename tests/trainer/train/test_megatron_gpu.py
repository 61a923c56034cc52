"""The CUDA paths of megatron_train / megatron_infer: megatron-core 0.16 on one GPU over nccl, with
Transformer Engine layers when TE is installed and megatron-core's local layers otherwise. Expected
values come from the HF model on the same GPU and from torch_train. Run on a GPU machine (megatron-core,
pydantic and omegaconf installed): `pytest -m gpu tests/trainer/train/test_megatron_gpu.py`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from tests.trainer.train.megatron_testing import nll_loss, rollout_batch, tiny_causal_lm
from trainer.cluster import distributed
from trainer.models.batch import response_logprobs
from trainer.train import OptimConfig, build_forward_strategy, build_strategy

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
pytest.importorskip("megatron.core")

ADAMW = OptimConfig(lr=1e-2, weight_decay=0.01, max_grad_norm=1.0, num_training_steps=10, warmup_steps=2)


@pytest.fixture
def nccl_group():
    distributed.init_process_group(
        rank=0, world_size=1, master_addr="127.0.0.1", master_port=distributed.find_free_port()
    )
    try:
        yield
    finally:
        distributed.destroy_process_group()  # megatron's parallel state too


def hf_outputs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, response log-probs) of an HF model on the GPU, in float32."""
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits.float()
        return logits, response_logprobs(model, batch, 1.0)


def test_converted_bf16_logits_equal_the_hf_model_within_bf16_tolerance(nccl_group: None) -> None:
    """bf16 tolerance = what bf16 costs the HF model itself: the Megatron model (bf16 weights, fp32
    softmax) may differ from the fp32 HF model by at most twice the bf16 HF model's own error."""
    batch = rollout_batch(8, seed=11)
    cuda = {k: v.cuda() for k, v in batch.items()}
    expected, expected_logprobs = hf_outputs(tiny_causal_lm("qwen2").cuda(), cuda)
    bf16, bf16_logprobs = hf_outputs(tiny_causal_lm("qwen2").to(torch.bfloat16).cuda(), cuda)
    strategy = build_forward_strategy(
        "megatron_infer", tiny_causal_lm("qwen2").to(torch.bfloat16), device="cuda"
    )
    logits = strategy.forward_no_grad(
        lambda m, b: m(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits,
        batch,
    )
    logprobs = strategy.forward_no_grad(lambda m, b: m.response_logprobs(b, 1.0), batch)
    real, mask = cuda["attention_mask"].bool(), cuda["response_mask"].bool()
    bf16_error = (bf16[real] - expected[real]).abs().max()
    assert 0 < bf16_error < 0.5
    assert (logits[real].float() - expected[real]).abs().max() <= 2 * bf16_error + 1e-3
    bf16_lp_error = (bf16_logprobs[mask] - expected_logprobs[mask]).abs().max()
    assert (logprobs[mask] - expected_logprobs[mask]).abs().max() <= 2 * bf16_lp_error + 1e-3


def test_one_grpo_step_lowers_the_loss_on_a_fixed_batch(nccl_group: None) -> None:
    from trainer.config.schema import PipelineConfig
    from trainer.roles.actor import LossSpec, actor_loss
    from trainer.train.ppo_update import normalisers_of

    cfg = PipelineConfig.model_validate({"adv_estimator": "grpo", "entropy_loss_coef": 0.0})
    batch = rollout_batch(8, seed=12)
    batch["advantages"] = torch.tensor([1.0, -1.0] * 4)[:, None] * batch["response_mask"]
    loss_fn = partial(actor_loss, LossSpec.from_config(cfg), 1.0, norm=normalisers_of(batch))
    strategy = build_strategy(
        "megatron_train",
        tiny_causal_lm("qwen2").to(torch.bfloat16),
        OptimConfig(lr=1e-3, num_training_steps=2, max_grad_norm=1.0),
        device="cuda",
    )
    old = strategy.forward_no_grad(lambda m, b: m.response_logprobs(b, 1.0), batch).cpu()
    fixed = {**batch, "old_log_probs": old}
    before = strategy.train_step([fixed], loss_fn)["loss"]
    after = float(strategy.forward_no_grad(lambda m, b: loss_fn(m, b)[0], fixed))
    assert after < before, f"one GRPO step did not lower the loss: {before} -> {after}"


def test_a_train_step_equals_torch_train_and_resumes_exactly(nccl_group: None, tmp_path: Path) -> None:
    batch = rollout_batch(8, seed=13)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    expected = build_strategy(
        "torch_train", tiny_causal_lm("llama", tied=True), ADAMW, device="cuda"
    ).train_step([batch], loss_fn)
    strategy = build_strategy(
        "megatron_train",
        tiny_causal_lm("llama", tied=True),
        ADAMW,
        device="cuda",
        strategy_config={"use_distributed_optimizer": True},
    )
    metrics = strategy.train_step([batch], loss_fn)
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-3)
    assert metrics["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-2)
    strategy.save_checkpoint(tmp_path / "ckpt")
    state = strategy.full_state_dict()
    first = strategy.train_step([batch], loss_fn)
    strategy.load_checkpoint(tmp_path / "ckpt")
    assert all(torch.equal(strategy.full_state_dict()[k], v) for k, v in state.items())
    assert strategy.train_step([batch], loss_fn) == pytest.approx(
        first, rel=1e-5
    )  # GPU kernels may reorder sums


def test_the_shortened_grpo_demo_learns_through_megatron_on_the_gpu(tmp_path: Path) -> None:
    """tests/trainer/pipeline/test_demo_learns.py's bar, with megatron_train for the actor and a
    megatron_infer reference for a KL loss."""
    from tests.trainer.pipeline.conftest import DEMO_GRPO, metrics_by_step, run_local
    from trainer.config import load_config

    cfg = load_config(
        DEMO_GRPO,
        [
            f"output_dir={tmp_path}",
            "max_steps=60",
            "eval_steps=30",
            "save_steps=1000",
            "track_with=none",
            "actor_train.training_args.learning_rate=4e-3",
            "actor_train.training_args.lr_scheduler_type=constant",  # as test_demo_learns
            "entropy_loss_coef=0.03",
            "actor_train.strategy_args.strategy_name=megatron_train",
            "use_kl_loss=true",
            "kl_loss_coef=0.001",
            "+reference.strategy_args.strategy_name=megatron_infer",
            "+reference.model_args.model_name_or_path=${pretrain}",
        ],
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    rewards = [metrics[step]["reward/mean"] for step in sorted(metrics)]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.15, f"reward did not rise: first 10 steps {first:.3f}, last 10 {last:.3f}"
    assert metrics[60]["eval/reward/mean"] > metrics[30]["eval/reward/mean"]
