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

import re
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainer.config.registries import (
    ANSWER_TAG_PATTERN,
    ENV_CONFIG_BOUNDS,
    GEM_RUNNER,
    ROLL_AGENT_RUNNERS,
    ROLL_UNSUPPORTED_AGENT_RUNNERS,
    TOOL_CALL_ENV_TYPES,
    EnvBound,
    env_config_defaults,
    env_config_refusals,
)
from trainer.config.roll_tools import drop_ignored

if TYPE_CHECKING:
    from trainer.config.sections.agentic import CustomEnvConfig

DEFAULT_MAX_TURNS = 10  # CustomEnvConfig.max_steps when neither it nor max_actions_per_traj is set

ROLL_KEYS: dict[str, tuple[str, ...]] = {
    "sokoban": ("dim_room", "action_pattern", "max_steps", "format_penalty"),
    "sokoban_native_env": ("dim_room", "action_pattern", "max_steps", "format_penalty"),
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
    return drop_ignored(env_type, options), None if penalty is None else float(penalty)


def env_config_range_errors(env_type: str, env_config: Mapping[str, Any] | None, *,
                            tag: str) -> list[tuple[str, str]]:
    """(path, message) for each env_config value out of its declared type or range (registries.ENV_CONFIG_BOUNDS),
    which the environment would refuse when the run starts; ROLL's dim_room is read as [dim_x, dim_y]. Each names
    the override to the nearest valid value, or the one that removes the key (the environment's default)."""
    where = f"custom_envs.{tag}.env_config"
    options = dict(env_config or {})
    room = options.get("dim_room") if "dim_room" in ROLL_KEYS.get(env_type, ()) else None
    from_room = isinstance(room, (list, tuple)) and len(room) == 2
    if from_room:  # as split_roll_env_config reads it; dim_x / dim_y set beside it win
        options = {"dim_x": room[0], "dim_y": room[1], **options}
    bounds = ENV_CONFIG_BOUNDS.get(env_type, {})
    full = {**env_config_defaults(env_type), **options}
    out: dict[str, str] = {}
    for key, why in env_config_refusals(env_type, options).items():
        if from_room and key in ("dim_x", "dim_y") and key not in (env_config or {}):
            fixed = [_nearest_valid(bounds[k], v, full) for k, v in zip(("dim_x", "dim_y"), room, strict=True)]
            fix = f"={fixed}".replace(" ", "") if None not in fixed else None
            key, why = "dim_room", f"{list(room)} ([rows, cols] = [dim_x, dim_y]): {key} {why}"
        else:
            near = _nearest_valid(bounds[key], options[key], full)
            fix = None if near is None else f"={near}"
        override = f"{where}.{key}{fix}" if fix else f"~{where}.{key}"
        out.setdefault(f"{where}.{key}", f"{why} (the {env_type} environment refuses it when the run starts); "
                       f"override {override}")  # dim_room: one message for both sides
    return list(out.items())


def _nearest_valid(bound: EnvBound, value: Any, options: Mapping[str, Any]) -> Any:
    """`value` when valid, the closest valid number to a number out of range, else None (removing it is the fix)."""
    if bound.refusal(value, options) is None:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return bound.nearest(value, options)


def episode_turns(spec: CustomEnvConfig) -> int:
    """Replies before an episode is cut off: max_steps, else max_actions_per_traj, else DEFAULT_MAX_TURNS."""
    return spec.max_steps or spec.max_actions_per_traj or DEFAULT_MAX_TURNS


# ROLL's GEMRunner (the proxy env manager's agent runner, trainer.envs.agent_runner): the agent_template fields it
# fills; any other is a KeyError in ROLL
AGENT_TEMPLATE_FIELDS: tuple[str, ...] = ("observation", "turn_idx", "suffix", "actions_left", "max_response_length")


def template_refusal(template: str) -> str | None:
    """Why GEMRunner cannot render agent_template (a field it does not fill, a positional `{}`, a stray brace),
    else None."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"not a format string ({exc})"
    unknown = sorted({re.split(r"[.\[!:]", name, maxsplit=1)[0] or "{}" for name in fields} - set(AGENT_TEMPLATE_FIELDS))
    if unknown:
        return (f"names {', '.join(unknown)}, which GEMRunner does not fill (it fills "
                f"{', '.join(AGENT_TEMPLATE_FIELDS)})")
    return None


def agent_runner_refusal(spec: CustomEnvConfig, tag: str) -> tuple[str, str, bool] | None:
    """(field, message, whether ROLL has it but it is not built) when the proxy env manager cannot play custom env
    `tag`: its agent_runner_cls unset or not built (GEMRunner is), its templates unset or not renderable, or its
    environment taking tool calls (GEMRunner sends text only); None when it can. Each message names the override."""
    where = f"custom_envs.{tag}"
    cls = spec.agent_runner_cls
    if cls is None:
        return (f"{where}.agent_runner_cls", f"unset, but the proxy env manager plays {tag} through an agent runner "
                f"(built: GEMRunner): override {where}.agent_runner_cls={GEM_RUNNER}", False)
    if cls not in ROLL_AGENT_RUNNERS:
        what = ROLL_UNSUPPORTED_AGENT_RUNNERS.get(cls)
        name = f"the {what} ({cls})" if what else f"unknown agent runner class {cls!r}"
        return (f"{where}.agent_runner_cls", f"{name} is not built in this version of PolicyLab; built: "
                f"{GEM_RUNNER} (text environments): override {where}.agent_runner_cls={GEM_RUNNER}, or "
                f"~{where}.env_manager_cls to play {tag} with the trajectory manager", what is not None)
    for name in ("agent_system_template", "agent_template"):
        if getattr(spec, name) is None:
            return (f"{where}.{name}", f"unset, but GEMRunner (the proxy env manager's runner) writes {tag}'s prompts "
                    f"with it: set {where}.{name}", False)
    assert spec.agent_template is not None
    why = template_refusal(spec.agent_template)
    if why:
        return (f"{where}.agent_template", f"{why}; ROLL's GEMRunner would fail to render it: override "
                f"{where}.agent_template with a template of those fields", False)
    if spec.env_type in TOOL_CALL_ENV_TYPES:
        return (f"{where}.env_manager_cls", f"GEMRunner sends text only and env_type {spec.env_type} takes tool "
                f"calls; the trajectory manager plays it: override ~{where}.env_manager_cls", False)
    return None
