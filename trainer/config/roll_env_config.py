"""ROLL's env_config keys for the environments built here, read as what acts here (issue 43).

Config layer: validation (trainer.config.checks.agentic) and the env manager (trainer.envs.manager) both read it.

ROLL's example files compose `examples/config/traj_envs.yaml` / `step_envs.yaml`, whose Sokoban and FrozenLake
entries give each environment ROLL's own constructor keys (roll/pipeline/agentic/env/{sokoban,frozen_lake}/env.py):

- `dim_room: [rows, cols]` (sokoban): the room's `dim_x`, `dim_y`.
- `action_pattern`: ROLL's default `<answer>(.*?)</answer>` is `action_format: answer_tag`, the same parse; any
  other pattern (e.g. FrozenLakeThink's `<think>…</think><answer>…</answer>`) is not built: refused, naming the
  override that plays the environment on the answer-tag parse.
- `max_steps`: ROLL's environment truncates after max_steps actions; here an episode ends after
  `custom_envs.<tag>.max_steps` replies (episode_turns below). An env max_steps not below that limit is never
  reached (as in ROLL's files, which set both from max_actions_per_traj); a lower one is refused, naming the
  override that makes it the episode's limit.
- `format_penalty`: the reward ROLL's environment adds to a reply that breaks the action format. ROLL main never
  reads the env manager's `format_penalty`; so here this key, when set, replaces the env manager's for this tag.

Other ROLL keys (`grid_lookup`, `grid_vocab`, `render_mode`, …) stay unknown to the environment and are refused
where it is built (trainer.envs.registry.make_env), naming the valid keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainer.config.registries import ANSWER_TAG_PATTERN

if TYPE_CHECKING:
    from trainer.config.sections.agentic import CustomEnvConfig

DEFAULT_MAX_TURNS = 10  # CustomEnvConfig.max_steps when neither it nor max_actions_per_traj is set

ROLL_KEYS: dict[str, tuple[str, ...]] = {
    "sokoban": ("dim_room", "action_pattern", "max_steps", "format_penalty"),
    "frozen_lake": ("action_pattern", "max_steps", "format_penalty"),
}


def split_roll_env_config(env_type: str, env_config: Mapping[str, Any] | None, *, tag: str,
                          episode_turns: int) -> tuple[dict[str, Any], float | None]:
    """(env_config in the environment's own keys, the format penalty ROLL's `format_penalty` sets or None).

    `episode_turns` is the episode's reply limit here (episode_turns below). ValueError naming the field and the
    override for a ROLL key whose value is not built (module docstring)."""
    options = dict(env_config or {})
    where = f"custom_envs.{tag}.env_config"
    keys = ROLL_KEYS.get(env_type, ())
    if "dim_room" in keys and "dim_room" in options:
        room = options.pop("dim_room")
        if not (isinstance(room, (list, tuple)) and len(room) == 2):
            raise ValueError(f"{where}.dim_room: {room!r}; ROLL's room size is [rows, cols]")
        options.setdefault("dim_x", room[0])
        options.setdefault("dim_y", room[1])
    if "action_pattern" in keys and "action_pattern" in options:
        pattern = options.pop("action_pattern")
        if pattern != ANSWER_TAG_PATTERN:
            raise ValueError(f"{where}.action_pattern: {pattern!r} is not built in this version of PolicyLab "
                             f"(built: ROLL's default {ANSWER_TAG_PATTERN!r}, the answer-tag parse); without it "
                             f"the environment reads the action in <answer>…</answer>: override ~{where}.action_pattern")
        options.setdefault("action_format", "answer_tag")
    if "max_steps" in keys and "max_steps" in options:
        steps = options.pop("max_steps")
        if isinstance(steps, int) and steps < episode_turns:
            raise ValueError(f"{where}.max_steps: {steps} ends ROLL's episode before custom_envs.{tag}.max_steps "
                             f"= {episode_turns} replies, the limit here: override custom_envs.{tag}.max_steps={steps}")
    penalty = options.pop("format_penalty", None) if "format_penalty" in keys else None
    return options, None if penalty is None else float(penalty)


def episode_turns(spec: CustomEnvConfig) -> int:
    """Replies before an episode is cut off: max_steps, else max_actions_per_traj, else DEFAULT_MAX_TURNS."""
    return spec.max_steps or spec.max_actions_per_traj or DEFAULT_MAX_TURNS
