"""The RLVR pipeline on megatron_train (actor) and megatron_infer (reference), local backend, with
megatron-core's CUDA calls redirected to the CPU (tests/trainer/train/megatron_testing.py): the first
step equals torch_train + hf_infer's, a run checkpointed at step 2 and resumed matches the
uninterrupted run, and the Hugging Face checkpoint it writes loads and has moved."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, load_cfg, metrics_by_step, run_local
from tests.trainer.train.megatron_testing import emulated_cuda

pytest.importorskip("megatron.core")

ON_MEGATRON = (
    "actor_train.strategy_args.strategy_name=megatron_train",
    "+reference.strategy_args.strategy_name=megatron_infer",
    "+reference.model_args.model_name_or_path=${pretrain}",
)
COMMON = ("use_kl_loss=true", "kl_loss_coef=0.01", "seed=7", "eval_steps=0")


def test_the_first_step_on_megatron_equals_torch_train(tmp_path: Path) -> None:
    assert (
        run_local(
            load_cfg(
                tmp_path / "torch",
                *COMMON,
                "max_steps=1",
                "save_steps=1000",
                "+reference.strategy_args.strategy_name=hf_infer",
                "+reference.model_args.model_name_or_path=${pretrain}",
            )
        )
        == 0
    )
    with emulated_cuda():
        assert (
            run_local(
                load_cfg(tmp_path / "megatron", *COMMON, "max_steps=1", "save_steps=1000", *ON_MEGATRON)
            )
            == 0
        )
    one, two = metrics_by_step(tmp_path / "torch")[1], metrics_by_step(tmp_path / "megatron")[1]
    assert one["reward/mean"] == two["reward/mean"]  # the same rollouts from the same initial weights
    for key in (
        "actor/loss",
        "actor/pg_loss",
        "actor/grad_norm",
        "actor/entropy",
        "actor/kl_loss",
        "actor/clipfrac",
    ):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    assert two["actor/kl_loss"] != 0  # the second PPO epoch moved the policy away from the reference


def test_a_megatron_run_resumed_at_step_2_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    common = (*COMMON, "max_steps=4", "save_steps=2", *ON_MEGATRON)
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    with emulated_cuda():
        assert run_local(load_cfg(full_dir, *common)) == 0
        assert run_local(load_cfg(cut_dir, *common, "max_steps=2")) == 0
        assert (cut_dir / "checkpoints" / "step_2" / "actor_train" / "strategy" / "dist").is_dir()
        assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest")) == 0
    full, resumed = metrics_by_step(full_dir), metrics_by_step(cut_dir)
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        mismatched = {
            k: (full[step][k], resumed[step][k]) for k in keys if abs(full[step][k] - resumed[step][k]) > 1e-6
        }
        assert not mismatched, f"step {step}: {mismatched}"
    _assert_hf_checkpoint_moved(cut_dir / "checkpoints" / "step_2" / "hf_model", cut_dir)


def _assert_hf_checkpoint_moved(path: Path, run_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    initial = AutoModelForCausalLM.from_pretrained(run_dir / "models" / "tiny-seed0", local_files_only=True)
    assert model.state_dict().keys() == initial.state_dict().keys()
    assert any(not torch.equal(p, initial.state_dict()[n]) for n, p in model.state_dict().items())


def test_shortened_grpo_demo_learns_through_megatron_train(tmp_path: Path) -> None:
    """As tests/trainer/pipeline/test_demo_learns.py for torch_train: 60 steps raise the reward."""
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
        ],
    )
    with emulated_cuda():
        assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    rewards = [metrics[step]["reward/mean"] for step in sorted(metrics)]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert first < 0.3
    assert last > first + 0.15, f"reward did not rise: first 10 steps {first:.3f}, last 10 {last:.3f}"
    assert metrics[60]["eval/reward/mean"] > metrics[30]["eval/reward/mean"]
