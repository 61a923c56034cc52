"""Validation of agentic configs: every rule names its field and what would be valid; the topology
counts trajectories, not prompts x samples; the example config is valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from config_testing import DELETE, changed

from trainer.config import validate_config
from trainer.config.topology import samples_per_rollout, train_shape

REPO = Path(__file__).resolve().parents[3]
AGENTIC: dict[str, Any] = {
    "train_env_manager": {"env_groups": 2, "group_size": 4, "tags": ["Lake"]},
    "custom_envs": {"Lake": {"env_type": "frozen_lake", "max_tokens_per_step": 4}},
    "actor_train.data_args": DELETE,
    "rewards": DELETE,
}


def issues(changes: dict[str, Any], kind: str) -> dict[str, list[str]]:
    result = validate_config(changed({**AGENTIC, **changes}))
    found: dict[str, list[str]] = {}
    for issue in result.errors if kind == "error" else result.warnings:
        found.setdefault(issue.path, []).append(issue.message)
    return found


def test_a_coherent_agentic_config_needs_no_data_and_no_reward() -> None:
    result = validate_config(changed(AGENTIC))
    assert result.errors == [], result.errors
    assert (
        result.config is not None and samples_per_rollout(result.config) == 8
    )  # rollout_batch_size trajectories
    shape = train_shape(result.config, "actor_train")
    assert (shape.samples, shape.optimizer_steps_per_rollout) == (
        8,
        1,
    )  # num_return_sequences_in_group 4 unused
    warned = issues({}, "warning")
    assert "train_env_manager.group_size" in warned["num_return_sequences_in_group"][0]


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"train_env_manager.tags": []}, "train_env_manager.tags", ["empty", "Lake"]),
        ({"train_env_manager.group_size": 3}, "train_env_manager.group_size", ["does not divide", "8"]),
        (
            {"train_env_manager.max_traj_per_env": 0, "train_env_manager.env_groups": 1},
            "train_env_manager.max_traj_per_env",
            ["need 2 each", "-1"],
        ),
        (
            {
                "train_env_manager.worker_cls": "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManagr"
            },
            "train_env_manager.worker_cls",
            ["did you mean roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager"],
        ),
        (
            {
                "train_env_manager.worker_cls": "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager"
            },
            "train_env_manager.worker_cls",
            ["step-concat env manager is not supported yet", "never imported"],
        ),
        (
            {"custom_envs.Lake.env_type": "maze"},
            "custom_envs.Lake.env_type",
            ["'maze' is not a registered environment", "frozen_lake, sokoban, calculator"],
        ),
        (
            {"custom_envs.Lake.max_tokens_per_step": 65},
            "custom_envs.Lake.max_tokens_per_step",
            ["65 tokens per turn exceed response_length = 64"],
        ),
        ({"async_generation_ratio": 1}, "rollout_mode", ["one_step_off", "sync only"]),
        ({"difficulty_loss_weight": True}, "difficulty_loss_weight", ["difficulty"]),
        (
            {"val_env_manager": {"env_groups": 2, "group_size": 4, "tags": ["Lake"]}, "val_batch_size": 6},
            "val_env_manager.group_size",
            ["does not divide val_batch_size = 6"],
        ),
    ],
)
def test_agentic_errors_name_the_field(changes: dict[str, Any], path: str, words: list[str]) -> None:
    found = issues(changes, "error")
    assert path in found, found
    assert all(any(word in message for message in found[path]) for word in words), found[path]


@pytest.mark.parametrize(("roll", "native"), [("traj_group_id", "state"), ("tags", "inductive")])
def test_roll_mains_grouping_columns_are_the_native_groupings(roll: str, native: str) -> None:
    """ROLL main groups by a column of the batch: traj_group_id (one start state), tags (one environment tag)."""
    result = validate_config(changed({**AGENTIC, "reward_normalization": {"grouping": roll}}))
    assert result.config is not None and result.config.reward_normalization.grouping == native


def test_agentic_warnings() -> None:
    unset = {"custom_envs.Lake.max_tokens_per_step": DELETE, "actor_infer.generating_args.max_new_tokens": 64}
    assert (
        "trajectory has room for one turn"
        in issues(unset, "warning")["custom_envs.Lake.max_tokens_per_step"][0]
    )
    assert (
        "environments give the rewards"
        in issues({"rewards": {"m": {"reward_type": "math_rule"}}}, "warning")["rewards"][0]
    )
    rlvr = validate_config(
        changed({"reward_normalization": {"method": "mean_std"}, "render_save_dir": "frames"})
    )
    warned = {w.path: w.message for w in rlvr.warnings}
    assert "only the agentic pipeline" in warned["reward_normalization"]
    assert "only the agentic pipeline" in warned["render_save_dir"]


def test_the_agentic_example_is_valid() -> None:
    result = validate_config(REPO / "examples" / "agentic_grid_cpu.yaml")
    assert result.ok, [str(i) for i in result.errors]
    assert [str(w) for w in result.warnings] == []
