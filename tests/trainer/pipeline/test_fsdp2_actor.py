"""actor_train on 2 Ray workers with fsdp2_train completes and matches the 1-worker step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local

# one global optimizer step of all 16 samples per rollout either way: 1 x (4 x 4) or 2 x (4 x 2)
COMMON = ("max_steps=2", "eval_steps=0", "save_steps=2", "ppo_epochs=1", "seed=3")


@pytest.mark.usefixtures("ray_cluster")
def test_two_fsdp2_workers_match_one_worker_at_step_1(tmp_path: Path) -> None:
    from trainer.pipeline.runner import RunIdentity, run_training

    single = load_cfg(tmp_path / "one", *COMMON, "actor_train.training_args.gradient_accumulation_steps=4")
    assert run_local(single) == 0

    sharded = load_cfg(
        tmp_path / "two", *COMMON,
        "actor_train.training_args.gradient_accumulation_steps=2",
        "actor_train.strategy_args.strategy_name=fsdp2_train",
        "actor_train.device_mapping=[0,1]",
        "actor_infer.device_mapping=[0]",
    )
    assert sharded.actor_train.device_mapping == [0, 1]
    assert run_training(sharded, RunIdentity("fsdp2"), backend="ray", log=lambda line: None) == 0
    assert events(tmp_path / "two", "status")[-1]["data"]["state"] == "succeeded"
    assert (tmp_path / "two" / "checkpoints" / "step_2" / "hf_model" / "model.safetensors").is_file()

    one, two = metrics_by_step(tmp_path / "one")[1], metrics_by_step(tmp_path / "two")[1]
    assert one["reward/mean"] == two["reward/mean"]  # same rollouts from the same initial weights
    for key in ("actor/loss", "actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/clipfrac"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    assert two["actor/grad_norm"] > 0
