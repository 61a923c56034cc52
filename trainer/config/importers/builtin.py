"""The frameworks' own config files that a `defaults:` list may name, built in as data.

A config pasted into the web editor arrives without its sibling files: ROLL's examples name
`../config/deepspeed_zero2@_here_` and `../config/traj_envs@_here_`, verl's recipes
`defaults: [ppo_trainer, _self_]`, SkyRL's ppo_base_config its `deepspeed_config` group and RLinf's
FSDP examples `../training_backend/fsdp@actor.fsdp_config`. Composition (trainer.config.loading)
asks here for any config it cannot find on disk; the frameworks' trees come from their surfaces
(the family the primary file belongs to), ROLL's helper files from the tables below.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from trainer.config.importers import rlinf_surface, skyrl_surface, verl_surface
from trainer.config.importers.surface import Surface
from trainer.config.presets import DEEPSPEED_PRESETS

SURFACES: dict[str, Surface] = {"verl": verl_surface.SURFACE, "skyrl": skyrl_surface.SURFACE,
                                "rlinf": rlinf_surface.SURFACE}

# ROLL's examples/config/traj_envs.yaml (main; envs.yaml in v0.3): helper variables and environment
# definitions that agentic examples reference as ${custom_env.SimpleSokoban}, ${max_actions_per_traj} …
# (the prompt templates are shortened here; they only shape agentic rollouts, which are not built).
_ANSWER = "<answer>(.*?)</answer>"


def _env(env_type: str, env_config: dict[str, Any]) -> dict[str, Any]:
    return {"env_type": env_type, "max_steps": "${max_actions_per_traj}", "max_tokens_per_step": "${max_tokens_per_step}",
            "env_manager_cls": "${env_manager_cls}", "use_thread_lock": True,
            "agent_system_template": "${agent_system_template}", "agent_template": "${agent_template}",
            "env_config": {"max_steps": "${max_actions_per_traj}", **env_config}}


_SOKOBAN = {"action_pattern": "${action_pattern}", "format_penalty": "${sokoban_format_penalty}"}
_FROZEN = {"format_penalty": "${frozen_format_penalty}", "is_slippery": False}
TRAJ_ENVS: dict[str, Any] = {
    "all_response_pattern": "^(.*)$", "action_pattern": _ANSWER,
    "think_action_pattern": "<think>(.*?)</think>\\s*" + _ANSWER, "max_tokens_per_step": 128,
    "max_actions_per_traj": 10, "sokoban_format_penalty": -0.15, "frozen_format_penalty": -0.01,
    "env_manager_cls": "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager",
    "custom_env": {
        "SimpleSokoban": _env("sokoban", {**_SOKOBAN, "dim_room": [6, 6], "num_boxes": 1}),
        "LargerSokoban": _env("sokoban", {**_SOKOBAN, "dim_room": [10, 10], "num_boxes": 2, "search_depth": 10}),
        "SokobanDifferentGridVocab": _env("sokoban", {**_SOKOBAN, "dim_room": [6, 6], "num_boxes": 1,
                                                      "search_depth": 30}),
        "FrozenLake": _env("frozen_lake", {"action_pattern": "${action_pattern}", **_FROZEN}),
        "FrozenLakeThink": _env("frozen_lake", {"action_pattern": "${think_action_pattern}", **_FROZEN}),
        "WebShopEnv": {**_env("webshop", {"observation_mode": "text", "format_penalty": -0.05}),
                       "max_env_step_concurrent": 10},
    },
    "agent_system_template": "You are a helpful assistant playing a game; aim for a high reward.",
    "agent_template": "Turn {turn_idx}:\nObservation:\n{observation}\nAnswer as <answer> [your answer] </answer>; "
                      "{actions_left} actions left, at most {max_response_length} tokens.\nNext action:",
    "single_prompt_agent_system_template": "You are a helpful assistant.",
    "single_prompt_agent_template": "{observation}",
}
ROLL_FILES: dict[str, dict[str, Any]] = {
    "traj_envs": TRAJ_ENVS, "envs": TRAJ_ENVS,
    "step_envs": {**TRAJ_ENVS, "env_manager_cls": "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"},
}


def normalise(path: str) -> str:
    """`../config/deepspeed_zero2.yaml` -> `config/deepspeed_zero2`; `/ppo_trainer` -> `ppo_trainer`."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    name = "/".join(parts)
    for suffix in (".yaml", ".yml"):
        name = name.removesuffix(suffix)
    return name


def builtin_config(path: str, primary: Mapping[str, Any],
                   choices: Mapping[str, Any]) -> tuple[dict[str, Any], str | None] | None:
    """(tree, package from the file header or None) of a framework config named `path`, or None."""
    key = normalise(path)
    name = key.rsplit("/", 1)[-1]
    if name in DEEPSPEED_PRESETS:
        return {name: copy.deepcopy(DEEPSPEED_PRESETS[name])}, None
    if name in ROLL_FILES and key in (name, f"config/{name}"):
        return copy.deepcopy(ROLL_FILES[name]), None
    for surface in SURFACES.values():
        found = surface.builtin(key, primary, choices)
        if found is not None:
            return found
    return None
