"""ROLL's agent-native protocol (AgentNativeStepEnvManager, roll/pipeline/agentic/env_manager/
agent_native_env_manager.py): the environment keeps the conversation itself, as a list of chat messages, and
the env manager only renders it.

    messages = [system, user_1]                       after reset
    messages += [assistant_k (the reply), user_k+1]   after each step

Each turn's prompt is the whole list through the chat template with the generation prompt
(trainer.pipeline.trajectory.native_prompt, ROLL's format_messages); each reply is one training row (its prompt
masked, the reply trained, the step's reward on its last token: ROLL's formulate_rollouts). The reply handed to
`step` is the reply's text with its special tokens kept (ROLL decodes with skip_special_tokens=False), so a reply
that ended with the chat template's end-of-turn token carries it in its assistant message, and the next prompt
renders it there (as ROLL's does).

`sokoban_native_env` (ROLL's roll/pipeline/agentic/env/sokoban/native_env.py, SokobanNativeEnv) is the built
Sokoban game (trainer.envs.grid.Sokoban) behind ROLL's messages:

    system   "{system_template}\\n\\n{the game's instruction}"
    user_1   "Here is the current state:\\n{grid}\\n\\n{observation_suffix}"
    user_k   "Current state:\\n{grid}\\n\\n{observation_suffix}"                       (k > 1)

with ROLL's default system_template and observation_suffix (SYSTEM_TEMPLATE, OBSERVATION_SUFFIX) unless
env_config sets them. ROLL's user message after a broken reply would carry a "last action is not valid" reminder,
but ROLL tests `info["action_is_valid"]`, a key its Sokoban puts only under info["metrics"], so the reminder never
appears; none appears here either. Actions are the game's: one move in <answer>…</answer>. Rewards are ROLL's
Sokoban's: the game's (−0.1 a move, ±1 a box on or off a target, +10 solved) and, for a reply without a valid
action, the −0.1 of gym-sokoban's no-op step that ROLL takes then, plus the format penalty the env manager adds
(env_config.format_penalty).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.config.registries import ENV_CONFIG_BOUNDS
from trainer.envs.base import Env, StepResult
from trainer.envs.grid import MOVES, Sokoban

ROOM = ENV_CONFIG_BOUNDS["sokoban_native_env"]
# ROLL's SokobanNativeEnv defaults
SYSTEM_TEMPLATE = ("You're a helpful assistant. You are a good game player. You are aiming to get high reward in "
                   "the game.")
ACTION_NAMES = tuple(move.capitalize() for move in MOVES)  # ROLL's ACTION_LOOKUP values: Up, Down, Left, Right
OBSERVATION_SUFFIX = (
    "\n\n<system-reminder>\nIMPORTANT: Ensure that your response is the format of '<answer> [your answer] </answer>',"
    "  with no extra text, eg. <answer>Right</answer>.\nYour available actions are:\n" + ", ".join(ACTION_NAMES)
    + "\n. </system-reminder>\n\nDecide the next action:\n"
)


def first_messages(system_template: str, instruction: str, grid: str, suffix: str) -> list[dict[str, str]]:
    """[system, user_1] of a new episode (module docstring)."""
    return [{"role": "system", "content": f"{system_template}\n\n{instruction}"},
            {"role": "user", "content": f"Here is the current state:\n{grid}\n\n{suffix}"}]


def next_user_message(grid: str, suffix: str) -> dict[str, str]:
    """user_k after a step (module docstring)."""
    return {"role": "user", "content": f"Current state:\n{grid}\n\n{suffix}"}


class NativeEnv(Env):
    """An environment that keeps its conversation (`messages`, module docstring) and offers `tool_schemas`."""

    messages: list[dict[str, Any]]


class SokobanNative(NativeEnv):
    """`sokoban_native_env` (module docstring); env_config: the game's dim_x, dim_y, num_boxes, search_depth,
    action_format, and ROLL's system_template and observation_suffix."""

    def __init__(self, dim_x: int = ROOM["dim_x"].default, dim_y: int = ROOM["dim_y"].default,
                 num_boxes: int = ROOM["num_boxes"].default, search_depth: int = ROOM["search_depth"].default,
                 action_format: str = "answer_tag", system_template: str | None = None,
                 observation_suffix: str | None = None) -> None:
        self.game = Sokoban(dim_x, dim_y, num_boxes, search_depth, action_format=action_format)
        self.instruction = self.game.instruction
        self.system_template = SYSTEM_TEMPLATE if system_template is None else system_template
        self.suffix = OBSERVATION_SUFFIX if observation_suffix is None else observation_suffix
        self.messages = []

    def reset(self, seed: int) -> str:
        grid = self.game.reset(seed)
        self.messages = first_messages(self.system_template, self.instruction, grid, self.suffix)
        return grid

    def step(self, reply: str) -> StepResult:
        result = self.game.step(reply)
        self.messages += [{"role": "assistant", "content": reply}, next_user_message(result.observation, self.suffix)]
        return StepResult(result.observation, result.reward, result.done, result.info)

    def render(self) -> str:
        return self.game.render()


def native_env_types(envs: Mapping[str, type[Env]]) -> tuple[str, ...]:
    """The registered environment types that speak the agent-native protocol."""
    return tuple(name for name, cls in envs.items() if issubclass(cls, NativeEnv))
