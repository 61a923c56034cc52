"""The environment interface: text in, text out, in the spirit of gym.

    observation = env.reset(seed)                       # the same seed gives the same start state
    observation, reward, done, info = env.step(reply)   # reply: the model's whole turn, as text

`step` takes the model's raw reply and parses it itself, so each environment owns its action
format. `info` always carries:

    format_ok  bool   the reply parsed as an action (or tool call); False: nothing happened and the
                      env manager adds its `format_penalty`
    success    bool   the goal is reached (the episode then ends)
    action     str | None   the parsed action (canonical name), None when the format was broken

and, when the reply made tool calls (trainer.envs.tools):

    tool_results  list[str]  one result per call, in order: the observation is these tool messages
                             (rendered with the chat template's tool role, trainer.pipeline.trajectory)

`render()` is a text frame of the current state (what `render_save_dir` collects). Environments are
plain Python, cheap to build, and hold no state across episodes beyond what `reset` sets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

# Why a trajectory ended (the `done_reason` of a rollout sample):
#   success      the environment ended the episode with the goal reached
#   failure      the environment ended it otherwise (fell into a hole, wrong final answer)
#   max_steps    the turn limit (CustomEnvConfig.max_steps) was reached
#   max_actions  the action limit (CustomEnvConfig.max_actions_per_traj) was reached
#   max_length   the next turn would not fit in response_length tokens
DONE_REASONS: tuple[str, ...] = ("success", "failure", "max_steps", "max_actions", "max_length")


class StepResult(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


class Env(ABC):
    """A text environment (module docstring). Subclasses set `instruction`, the text shown before the
    first observation unless the config's `env_instruction` replaces it, and a tool-calling environment
    `tool_schemas`, which the first prompt passes to the chat template."""

    instruction: str = ""
    tool_schemas: tuple[dict[str, Any], ...] = ()  # the tools offered, as chat templates take them (`tools=`)

    @abstractmethod
    def reset(self, seed: int) -> str:
        """Start an episode from the state `seed` determines; returns the first observation."""

    @abstractmethod
    def step(self, reply: str) -> StepResult:
        """Apply the model's reply; a reply that breaks the format changes nothing (format_ok False)."""

    @abstractmethod
    def render(self) -> str:
        """A text frame of the current state."""
