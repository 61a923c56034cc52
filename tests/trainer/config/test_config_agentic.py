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
                "train_env_manager.worker_cls": "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager"
            },
            "custom_envs.Lake.agent_runner_cls",  # built (decision 0060): the runner it needs is named
            ["unset, but the proxy env manager plays Lake through an agent runner",
             "override custom_envs.Lake.agent_runner_cls=roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner"],
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
        ({"async_generation_ratio": 2}, "rollout_mode", ["async (lookahead 2)", "override async_generation_ratio=1"]),
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


ROLL_SOKOBAN = {"env_type": "sokoban", "max_steps": 5, "max_tokens_per_step": 4,
                "env_config": {"dim_room": [6, 7], "num_boxes": 1, "max_steps": 5, "format_penalty": -0.15,
                               "action_pattern": "<answer>(.*?)</answer>",
                               "grid_lookup": {0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"},
                               "grid_vocab": {"W": "wall", "A": "player"}}}


def test_roll_sokoban_env_config_is_read_as_the_built_environment() -> None:
    """ROLL's traj_envs.yaml Sokoban keys act (trainer.envs.roll_env_config): the room size, its symbols, its
    format penalty (ROLL main reads the environment's, never the env manager's)."""
    from trainer.envs.manager import EnvManager

    result = validate_config(changed({**AGENTIC, "train_env_manager.tags": ["Box"], "custom_envs": {"Box": ROLL_SOKOBAN}}))
    assert result.errors == [], result.errors
    config = result.config
    manager = EnvManager("train_env_manager", config.train_env_manager, config.custom_envs, batch_size=8, seed=0)
    env = manager.make_env("Box")
    rows = env.reset(1).splitlines()
    assert (len(rows), len(rows[0])) == (6, 7) and set(rows[0]) == {"W"} and "A" in "".join(rows)
    assert env.instruction.endswith("W: wall, A: player")
    assert manager.penalty("Box") == -0.15


@pytest.mark.parametrize(("key", "value", "override"), [
    ("action_pattern", "<think>(.*?)</think>\\s*<answer>(.*?)</answer>", "~custom_envs.Box.env_config.action_pattern"),
    ("max_steps", 3, "custom_envs.Box.max_steps=3"),
    ("render_mode", "rgb_array", "~custom_envs.Box.env_config.render_mode"),
])
def test_a_roll_env_config_value_not_built_is_an_error_naming_the_override(key: str, value: Any, override: str) -> None:
    """Refused at validation, not when the run starts: an unbuilt action pattern, an env max_steps below the
    episode's limit, a key the environment does not take."""
    box = {**ROLL_SOKOBAN, "env_config": {**ROLL_SOKOBAN["env_config"], key: value}}
    found = issues({"train_env_manager.tags": ["Box"], "custom_envs": {"Box": box}}, "error")
    messages = [m for path, ms in found.items() if path.startswith("custom_envs.Box.env_config") for m in ms]
    assert len(messages) == 1 and messages[0].endswith(f"override {override}"), found


def test_roll_mains_norm_pair_validates_and_bad_types_name_the_valid_values() -> None:
    """ROLL main's reward_normalization.norm_mean_type / norm_std_type (group mean with batch std, …)."""
    pair = {"grouping": "traj_group_id", "norm_mean_type": "group", "norm_std_type": "batch"}
    result = validate_config(changed({**AGENTIC, "reward_normalization": pair}))
    assert result.errors == [], result.errors
    norm = result.config.reward_normalization
    assert (norm.method, norm.norm_mean_type, norm.norm_std_type) == ("identity", "group", "batch")
    bad = issues({"reward_normalization": {"norm_std_type": "running"}}, "error")
    [message] = bad["reward_normalization.norm_std_type"]
    assert "'batch' or 'group'" in message and "~reward_normalization.norm_std_type" in message
