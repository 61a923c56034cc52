"""ROLL's agent runners, as the proxy env manager plays them (ProxyEnvManager, decision 0060; torch-free).

ROLL's ProxyEnvManager does not write prompts itself: an AgentRunner (`custom_envs.<tag>.agent_runner_cls`) plays
the environment and sends OpenAI-style chat requests, which the manager tokenizes message by message (its
MessageTracker) and answers with the policy. Built here: GEMRunner (roll/pipeline/agentic/agent_runner/gem_runner.py),
the runner of text environments (Sokoban, FrozenLake, the GEM games). Its conversation is

    system   agent_system_template + "\\n\\n" + env_instruction      (agent_system_template alone without one)
    user     agent_template.format(observation=o_1, turn_idx=1, actions_left=max_steps, ...)
    assistant  reply_1   (the decoded reply, special tokens skipped; env.step parses the action from it)
    user     agent_template.format(observation=o_2, turn_idx=2, actions_left=max_steps - 1, ...)
    ...

for at most max_steps replies, ending early when the environment terminates. agent_template's fields are
observation, turn_idx, actions_left, max_response_length (max_tokens_per_step, else 128) and suffix (""), each
filled only when the template names it (ROLL's contains_renderable_field); any other field is a KeyError in ROLL,
refused when the config is validated (trainer.config.roll_env_config.agent_runner_refusal).

How the proxy's messages become tokens, rewards and rows is in trainer.pipeline.trajectory (module docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_RESPONSE_LENGTH = 128  # ROLL: env_config.get("max_tokens_per_step", 128)


def renders(template: str, key: str) -> bool:
    """ROLL's contains_renderable_field: the template holds `{key}`, `{key:…}`, `{key.…}` or `{key[…]}`
    (regex `\\{key(?!\\w).*\\}`)."""
    return re.search(r"\{" + re.escape(key) + r"(?!\w).*\}", template) is not None


@dataclass(frozen=True)
class GEMRunner:
    """The prompts of ROLL's GEMRunner (module docstring)."""

    system_template: str
    agent_template: str
    max_steps: int
    max_response_length: int = DEFAULT_MAX_RESPONSE_LENGTH

    def system_text(self, instruction: str) -> str:
        """system_template + "\\n\\n" + instruction, or system_template alone when the instruction is empty."""
        return f"{self.system_template}\n\n{instruction}" if instruction else self.system_template

    def user_text(self, observation: str, turn: int) -> str:
        """agent_template for the observation the turn-th reply answers (turn 1, 2, …): turn_idx = turn,
        actions_left = max_steps − turn + 1, max_response_length, suffix = "" (only the fields it names)."""
        values = {
            "observation": observation,
            "turn_idx": turn,
            "suffix": "",
            "actions_left": self.max_steps - turn + 1,
            "max_response_length": self.max_response_length,
        }
        return self.agent_template.format(
            **{k: v for k, v in values.items() if k == "observation" or renders(self.agent_template, k)}
        )

    def first_messages(self, instruction: str, observation: str) -> list[dict[str, str]]:
        """The first request's messages: the system message and the first observation's user message."""
        return [
            {"role": "system", "content": self.system_text(instruction)},
            {"role": "user", "content": self.user_text(observation, 1)},
        ]
