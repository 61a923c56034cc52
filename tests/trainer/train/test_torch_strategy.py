from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from tests.trainer.train.tiny_qwen import (
    count_loss_tokens,
    make_batch,
    split_rows,
    tiny_qwen2,
    token_mean_loss,
)
from trainer.train import OptimConfig, build_strategy, lr_multiplier


def optim(**overrides) -> OptimConfig:
    values = {"lr": 1e-2, "warmup_steps": 0, "lr_scheduler_type": "constant", "num_training_steps": 10}
    return OptimConfig(**{**values, **overrides})


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # warmup W=2 over T=6 steps: s/W during warmup, then the decay over (T-W)=4 steps
        ("constant", [0.0, 0.5, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.0, 0.5, 1.0, 0.75, 0.5, 0.25]),
        ("cosine", [0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5, 0.5 * (1 + math.cos(3 * math.pi / 4))]),
    ],
)
def test_strategy_reports_the_scheduled_lr_each_step(kind: str, expected: list[float]) -> None:
    cfg = optim(lr=0.1, warmup_steps=2, lr_scheduler_type=kind, num_training_steps=6)
    assert [lr_multiplier(s, cfg) for s in range(6)] == pytest.approx(expected)
    strategy = build_strategy("torch_train", torch.nn.Linear(2, 1), cfg)
    batch = {"x": torch.ones(1, 2)}
    lrs = [strategy.train_step([batch], lambda m, b: (m(b["x"]).sum(), {}))["lr"] for _ in range(6)]
    assert lrs == pytest.approx([0.1 * e for e in expected])


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    batch = make_batch(4, 12, torch.Generator().manual_seed(1))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    results = []
    for parts in (1, 2):
        strategy = build_strategy("torch_train", tiny_qwen2(seed=3), optim(max_grad_norm=None))
        metrics = strategy.train_step(split_rows(batch, parts), loss_fn)
        results.append((metrics, {n: p.grad.clone() for n, p in strategy.model.named_parameters()}))
    (whole, whole_grads), (halves, half_grads) = results
    assert halves["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert halves["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
    assert whole["loss"] == pytest.approx(math.log(300), rel=0.05)  # random init: ~uniform over the vocab
    for name, grad in whole_grads.items():
        torch.testing.assert_close(half_grads[name], grad, rtol=1e-4, atol=1e-6)


def test_gradients_are_clipped_to_max_grad_norm_and_the_unclipped_norm_reported() -> None:
    batch = make_batch(2, 10, torch.Generator().manual_seed(2))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    free = build_strategy("torch_train", tiny_qwen2(seed=4), optim(max_grad_norm=None))
    norm = free.train_step([batch], loss_fn)["grad_norm"]
    clipped = build_strategy("torch_train", tiny_qwen2(seed=4), optim(max_grad_norm=norm / 4))
    reported = clipped.train_step([batch], loss_fn)["grad_norm"]
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in clipped.model.parameters()]))
    assert reported == pytest.approx(norm, rel=1e-5)
    assert float(after) == pytest.approx(norm / 4, rel=1e-4)


def test_non_finite_gradient_skips_the_update() -> None:
    strategy = build_strategy("torch_train", torch.nn.Linear(2, 1), optim())
    before = [p.detach().clone() for p in strategy.model.parameters()]
    metrics = strategy.train_step([{"x": torch.ones(1, 2)}], lambda m, b: (m(b["x"]).sum() * float("inf"), {}))
    assert metrics["update_skipped"] == 1.0
    assert all(torch.equal(a, p) for a, p in zip(before, strategy.model.parameters(), strict=True))


def run_steps(strategy, steps: int, batch_size: int = 2) -> list[float]:
    """Each step draws its batch from the global RNGs (torch, numpy, python), and the model uses
    dropout: a resumed run matches only if every RNG state was restored."""
    losses = []
    for _ in range(steps):
        seq_len = random.randint(8, 12) + int(np.random.randint(0, 2))
        batch = make_batch(batch_size, seq_len)
        losses.append(strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))["loss"])
    return losses


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def test_resume_from_checkpoint_is_bit_identical(tmp_path) -> None:
    cfg = optim(warmup_steps=1, lr_scheduler_type="cosine", num_training_steps=4)
    seed_all(7)
    straight = build_strategy("torch_train", tiny_qwen2(seed=0, attention_dropout=0.3), cfg)
    straight_losses = run_steps(straight, 4)

    seed_all(7)
    first = build_strategy("torch_train", tiny_qwen2(seed=0, attention_dropout=0.3), cfg)
    losses = run_steps(first, 2)
    first.save_checkpoint(tmp_path / "step_2")
    seed_all(123)  # the fresh process starts from other RNG states and other weights
    resumed = build_strategy("torch_train", tiny_qwen2(seed=99, attention_dropout=0.3), cfg)
    resumed.load_checkpoint(tmp_path / "step_2")
    losses += run_steps(resumed, 2)

    assert losses == straight_losses
    for (name, p), q in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert resumed.scheduler.get_last_lr() == straight.scheduler.get_last_lr()


def test_full_state_dict_and_forward_no_grad() -> None:
    strategy = build_strategy("torch_train", tiny_qwen2(seed=5), optim())
    state = strategy.full_state_dict()
    assert state.keys() == strategy.model.state_dict().keys()
    assert all(t.device.type == "cpu" for t in state.values())
    state["model.norm.weight"].add_(1.0)  # a copy: editing it leaves the model alone
    assert torch.equal(strategy.model.model.norm.weight, torch.ones(32))
    batch = make_batch(1, 6)
    logits = strategy.forward_no_grad(lambda m, b: m(input_ids=b["input_ids"]).logits, batch)
    assert not logits.requires_grad and strategy.model.training


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"lr_scheduler_type='step'.*constant, linear, cosine"):
        OptimConfig(lr_scheduler_type="step")
    with pytest.raises(ValueError, match=r"unknown training strategy 'fsdp'.*torch_train, fsdp2_train"):
        build_strategy("fsdp", torch.nn.Linear(1, 1), optim())
    with pytest.raises(ValueError, match="deepspeed_train needs the role's TrainShape"):
        build_strategy("deepspeed_train", torch.nn.Linear(1, 1), optim())
    with pytest.raises(RuntimeError, match=r"torch\.distributed initialised"):
        build_strategy("fsdp2_train", torch.nn.Linear(1, 1), optim(), world_size=2)
    strategy = build_strategy("torch_train", torch.nn.Linear(2, 1), optim())
    with pytest.raises(ValueError, match=r"\['loss'\].*rename"):
        strategy.train_step([{"x": torch.ones(1, 2)}], lambda m, b: (m(b["x"]).sum(), {"loss": 1.0}))


def test_optim_config_from_training_args() -> None:
    args = {"learning_rate": 3e-6, "adam_beta2": 0.95, "warmup_steps": 5, "lr_scheduler_type": "linear"}
    cfg = OptimConfig.from_training_args(args, num_training_steps=50)
    assert (cfg.lr, cfg.betas, cfg.warmup_steps, cfg.num_training_steps) == (3e-6, (0.9, 0.95), 5, 50)
    assert cfg.lr_scheduler_type == "linear" and cfg.max_grad_norm == 1.0


def test_optim_config_reads_the_typed_section_and_refuses_a_misspelt_name() -> None:
    from pydantic import ValidationError

    from trainer.config.schema import TrainingArgs

    typed = TrainingArgs(learning_rate=0.25, optim="sgd", warmup_ratio=0.1)
    cfg = OptimConfig.from_training_args(typed, num_training_steps=40)
    assert (cfg.lr, cfg.optimizer, cfg.warmup_steps) == (0.25, "sgd", 4)
    with pytest.raises(ValidationError, match="learning_rat"):  # never a silent fall-back to the default lr
        OptimConfig.from_training_args({"learning_rat": 0.1}, num_training_steps=10)
