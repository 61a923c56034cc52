"""Exact resume: a run checkpointed at step k and resumed matches the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, REPO_ROOT, load_cfg, metrics_by_step, run_local

PPO = ("critic.training_args.per_device_train_batch_size=4", "critic.training_args.gradient_accumulation_steps=2")


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_resumed_run_matches_uninterrupted_run(tmp_path: Path, algo: str) -> None:
    source = DEMO_GRPO if algo == "grpo" else REPO_ROOT / "examples" / "demo_ppo_cpu.yaml"
    common = ("max_steps=4", "eval_steps=2", "save_steps=2", "seed=7", *(PPO if algo == "ppo" else ()))
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    assert run_local(load_cfg(full_dir, *common, source=source)) == 0
    # the same run stopped after step 2 (its checkpoint), then resumed with `latest`
    assert run_local(load_cfg(cut_dir, *common, "max_steps=2", source=source)) == 0
    _assert_hf_checkpoint_loads(cut_dir / "checkpoints" / "step_2" / "hf_model")
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest", source=source)) == 0

    full, resumed = metrics_by_step(full_dir), metrics_by_step(cut_dir)
    assert sorted(full) == sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        assert keys == {k for k in resumed[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "actor/grad_norm", "reward/mean", "actor/entropy"} <= keys
        if algo == "ppo":
            assert {"critic/vf_loss", "critic/values_mean"} <= keys
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys
                      if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    if algo == "grpo":  # a child run (its own run dir) resuming from the parent's checkpoint path
        child_dir = tmp_path / "child"
        step_2 = cut_dir / "checkpoints" / "step_2"
        assert run_local(load_cfg(child_dir, *common, f"resume_from_checkpoint={step_2}", source=source)) == 0
        child = metrics_by_step(child_dir)
        assert sorted(child) == [3, 4] and child[4]["actor/pg_loss"] == full[4]["actor/pg_loss"]
    # the learning actually moved the policy, so equality is not trivial
    assert full[4]["actor/grad_norm"] > 0 and full[3]["actor/approx_kl"] != full[4]["actor/approx_kl"]


def _assert_hf_checkpoint_loads(path: Path) -> None:
    """The saved policy is a plain transformers checkpoint that differs from the initial weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    initial = AutoModelForCausalLM.from_pretrained(path.parents[2] / "models" / "tiny-seed0", local_files_only=True)
    assert AutoTokenizer.from_pretrained(path, local_files_only=True).eos_token == "<|im_end|>"
    changed = [n for n, p in model.state_dict().items() if not torch.equal(p, initial.state_dict()[n])]
    assert changed, "checkpointed weights equal the initial ones"


@pytest.mark.slow
def test_resume_on_the_ray_backend_restores_every_stateful_part(tmp_path: Path, ray_cluster: None) -> None:
    """Workers as Ray actors (the platform's path), with every piece of state a resume must carry:
    the adaptive KL controller (β moves each step), running reward statistics, a critic (GAE), the
    reference, and the rollout/reference workers' RNG. Killing after step 2 and resuming must give
    steps 3 and 4 exactly as the uninterrupted run has them."""
    from trainer.pipeline.runner import RunIdentity, run_training

    source = REPO_ROOT / "examples" / "demo_ppo_cpu.yaml"
    common = (*PPO, "max_steps=4", "eval_steps=0", "save_steps=2", "seed=11",
              "add_token_level_kl=true", "init_kl_coef=0.05", "kl_ctrl_type=adaptive", "target_kl=0.01",
              "kl_horizon=50", "reference.model_args.model_name_or_path=${pretrain}", "reference.device_mapping=[0]",
              "norm_mean_type=running", "norm_std_type=running")

    def run(out: Path, *extra: str) -> None:
        cfg = load_cfg(out, *common, *extra, source=source)
        assert run_training(cfg, RunIdentity(out.name), backend="ray", log=lambda line: None) == 0

    run(tmp_path / "full")
    run(tmp_path / "cut", "max_steps=2")
    run(tmp_path / "cut", "resume_from_checkpoint=latest")
    full, resumed = metrics_by_step(tmp_path / "full"), metrics_by_step(tmp_path / "cut")
    assert sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        assert {"actor/kl_coef", "critic/vf_loss", "actor/pg_loss", "reward/mean"} <= keys
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys
                      if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    # the state is live, so equality proves it was carried over
    assert full[3]["actor/kl_coef"] != full[1]["actor/kl_coef"]


LEGACY = REPO_ROOT / "tests" / "fixtures" / "checkpoints"


def test_a_checkpoint_written_by_the_layout_before_roles_resumes_exactly(tmp_path: Path) -> None:
    """tests/fixtures/checkpoints/7853fe5_ppo_step_2 was written at commit 7853fe5 (role workers in
    trainer/cluster/workers.py, RNG saved twice per trained rank) by the PPO demo below stopped at step 2;
    7853fe5_ppo_metrics.json holds that commit's uninterrupted steps 3 and 4. Resumed by today's code
    (trainer/roles, RNG once per rank), steps 3 and 4 match them."""
    import json
    import shutil

    checkpoint = tmp_path / "7853fe5_step_2"
    shutil.copytree(LEGACY / "7853fe5_ppo_step_2", checkpoint)
    expected = {int(step): values for step, values in json.loads((LEGACY / "7853fe5_ppo_metrics.json").read_text()).items()}
    source = REPO_ROOT / "examples" / "demo_ppo_cpu.yaml"
    common = ("max_steps=4", "eval_steps=2", "save_steps=2", "seed=7", *PPO)
    out = tmp_path / "run"
    assert run_local(load_cfg(out, *common, f"resume_from_checkpoint={checkpoint}", source=source)) == 0
    resumed = metrics_by_step(out)
    assert sorted(resumed) == [3, 4]
    for step in (3, 4):
        keys = {k for k in expected[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "critic/vf_loss", "reward/mean"} <= keys <= set(resumed[step])
        mismatched = {k: (expected[step][k], resumed[step][k]) for k in keys if abs(expected[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
