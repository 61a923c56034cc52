"""Validation of tool-calling environments (decision 0041): env_type tool_use is registered, and
parse_tool_call_parameter_to_dict acts (no "no effect" warning) where an agentic run plays a tool_use
environment, and is reported unused everywhere else."""

from __future__ import annotations

from typing import Any

from config_testing import DELETE, changed

from trainer.config import validate_config

SHOP: dict[str, Any] = {
    "train_env_manager": {"env_groups": 2, "group_size": 4, "tags": ["Shop"]},
    "custom_envs": {"Shop": {"env_type": "tool_use", "max_tokens_per_step": 32}},
    "actor_train.data_args": DELETE,
    "rewards": DELETE,
}
LAKE = {**SHOP, "train_env_manager": {"env_groups": 2, "group_size": 4, "tags": ["Lake"]},
        "custom_envs": {"Lake": {"env_type": "frozen_lake", "max_tokens_per_step": 4}}}


def warnings(changes: dict[str, Any]) -> list[str]:
    result = validate_config(changed(changes))
    assert result.errors == [], result.errors
    return [w.message for w in result.warnings if w.path == "parse_tool_call_parameter_to_dict"]


def test_the_flag_acts_on_a_played_tool_use_environment() -> None:
    assert warnings({**SHOP, "parse_tool_call_parameter_to_dict": True}) == []
    # played in evaluation only is played too
    assert warnings({**LAKE, "custom_envs.Shop": {"env_type": "tool_use", "max_tokens_per_step": 32},
                     "val_env_manager": {"env_groups": 1, "group_size": 1, "tags": ["Shop"]},
                     "parse_tool_call_parameter_to_dict": True}) == []


def test_the_flag_is_unused_without_a_tool_use_environment() -> None:
    unused = ["unused: no environment played takes tool calls (env_type tool_use of an agentic run)"]
    assert warnings({**LAKE, "parse_tool_call_parameter_to_dict": True}) == unused
    assert warnings({"parse_tool_call_parameter_to_dict": True}) == unused  # an RLVR run
    # defined but not played
    assert warnings({**LAKE, "custom_envs.Shop": {"env_type": "tool_use"}, "parse_tool_call_parameter_to_dict": True}) \
        == unused
    assert warnings({**LAKE, "parse_tool_call_parameter_to_dict": False}) == []
