"""Model, optimizer and seed knobs that used to be accepted and ignored act now (issue 11): each test
sets the knob and checks its effect against a hand formula or the library's own state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local

TWO_STEPS = ("max_steps=2", "eval_steps=0", "save_steps=1000")
OPT_STEPS_PER_ROLLOUT = 4  # FAST: 16 samples / (4 × 2) = 2 mini-batches × ppo_epochs 2


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


def _cfg(tmp_path: Path, tiny_model: Path, *overrides: str):
    return load_cfg(tmp_path, f"pretrain={tiny_model}", f"actor_train.model_args.model_name_or_path={tiny_model}",
                    f"actor_infer.model_args.model_name_or_path={tiny_model}", *overrides)


def test_model_args_reach_the_loaded_model(tmp_path: Path, tiny_model: Path) -> None:
    from trainer.roles.common import load_role_model

    cfg = _cfg(tmp_path, tiny_model, "actor_train.model_args.attn_implementation=eager",
               "actor_train.model_args.disable_gradient_checkpointing=false",
               "+actor_train.model_args.model_config_kwargs.rms_norm_eps=0.001")
    trained = load_role_model(cfg, "actor_train", training=True)
    assert trained.config._attn_implementation == "eager"
    assert trained.config.rms_norm_eps == 0.001  # config.json says 1e-6
    assert trained.is_gradient_checkpointing  # ROLL's default: recompute activations in backward
    assert not load_role_model(cfg, "actor_infer").is_gradient_checkpointing  # generation never does

    off = _cfg(tmp_path, tiny_model, "actor_train.model_args.disable_gradient_checkpointing=true")
    assert not load_role_model(off, "actor_train", training=True).is_gradient_checkpointing


def test_gradient_checkpointing_changes_no_gradient(tmp_path: Path, tiny_model: Path) -> None:
    """Recomputing activations is a memory/speed trade: the gradients must be the same."""
    from trainer.roles.common import load_role_model

    grads = []
    for flag in ("false", "true"):
        model = load_role_model(_cfg(tmp_path, tiny_model, f"actor_train.model_args.disable_gradient_checkpointing={flag}"),
                                "actor_train", training=True)
        model.train()
        ids = torch.arange(3, 19).view(2, 8)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize(("optim", "expected_class"), [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam),
                                                         ("adamw_torch", torch.optim.AdamW)])
def test_training_args_optim_picks_the_optimizer(optim: str, expected_class: type) -> None:
    from trainer.train.base import OptimConfig, build_optimizer

    param = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    config = OptimConfig.from_training_args({"optim": optim, "learning_rate": 0.1, "weight_decay": 0.0}, 10)
    optimizer = build_optimizer([param], config)
    assert type(optimizer) is expected_class
    if optim == "sgd":  # p ← p − lr·g with g = 2p (loss = Σp²)
        (param**2).sum().backward()
        optimizer.step()
        torch.testing.assert_close(param.detach(), torch.tensor([1.0 - 0.1 * 2.0, -2.0 + 0.1 * 4.0]))


def test_training_seed_and_tf32_are_applied_per_rank(tmp_path: Path, tiny_model: Path) -> None:
    from trainer.roles.common import seed_training_role

    cfg = _cfg(tmp_path, tiny_model, "seed=5", "actor_train.training_args.seed=1234",
               "actor_train.training_args.tf32=true")
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        seed_training_role(cfg, "actor_train", rank=3)
        assert torch.initial_seed() == 1234 + 3
        assert torch.backends.cuda.matmul.allow_tf32 is True
        seed_training_role(_cfg(tmp_path, tiny_model, "seed=5"), "actor_train", rank=1)
        assert torch.initial_seed() == 5 + 1  # unset: the pipeline seed
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _mean_linear_lr(step: int, total: int) -> float:
    """Mean over the pipeline step's optimizer steps s of the linear schedule max(0, 1 − s/T)."""
    first = (step - 1) * OPT_STEPS_PER_ROLLOUT
    return sum(max(0.0, 1 - s / total) for s in range(first, first + OPT_STEPS_PER_ROLLOUT)) / OPT_STEPS_PER_ROLLOUT


def test_training_args_max_steps_sets_the_schedule_length(tmp_path: Path, tiny_model: Path) -> None:
    lr = ("actor_train.training_args.lr_scheduler_type=linear", "actor_train.training_args.learning_rate=0.01",
          "actor_train.training_args.warmup_steps=0",
          *TWO_STEPS)
    derived = metrics_by_step(tmp_path / "derived") if run_local(_cfg(tmp_path / "derived", tiny_model, *lr)) == 0 else {}
    capped_cfg = _cfg(tmp_path / "capped", tiny_model, *lr, "actor_train.training_args.max_steps=4")
    assert run_local(capped_cfg) == 0
    capped = metrics_by_step(tmp_path / "capped")
    for step in (1, 2):
        assert derived[step]["actor/lr"] == pytest.approx(0.01 * _mean_linear_lr(step, 2 * OPT_STEPS_PER_ROLLOUT))
        assert capped[step]["actor/lr"] == pytest.approx(0.01 * _mean_linear_lr(step, 4))
    assert capped[2]["actor/lr"] == 0.0


def test_generating_args_seed_changes_the_rollouts(tmp_path: Path, tiny_model: Path) -> None:
    def responses(out: Path, *overrides: str) -> list[str]:
        assert run_local(_cfg(out, tiny_model, "max_steps=1", "eval_steps=0", "save_steps=1000", *overrides)) == 0
        return [s["response"] for s in events(out, "rollouts")[0]["data"]["samples"]]

    base = responses(tmp_path / "a")
    assert responses(tmp_path / "b", "actor_infer.generating_args.seed=42") == base  # 42 is the pipeline seed
    assert responses(tmp_path / "c", "actor_infer.generating_args.seed=7") != base
