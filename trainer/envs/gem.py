"""GEM environments (the gem-llm package, https://github.com/axon-rl/gem) behind the Env interface (issue 43).

ROLL plays them by name: `custom_envs.<tag>.env_type: game:GuessTheNumber-v0` or `rg:letter_counting`, built with
`gem.make(env_type, **env_config)` (roll/pipeline/agentic/env/__init__.py; ROLL pins gem-llm==0.0.4, as we do).
Here each built name is a subclass below, so the env_config keys are its constructor's parameters (GEM's own
registration defaults, overridden by env_config as gem.make does) and nothing a config names is imported.

What GEM defines, kept as is: the observation (GEM's text, then its `suffix` on its own line, as ROLL's GEM game
template `{observation}\\n{suffix}` renders it), the reward (gem.utils.constants.LanguageGameReward for games:
1.0 win, -0.1 format error, which ends the episode, 1 − distance/range at the turn limit; reasoning-gym's
`score_answer` for `rg:` tasks), and the episode end (terminated or truncated). Here `format_ok` is False exactly when
GEM scored a format error (games) or the reply has no \\boxed{} answer (`rg:`), and `success` when the reward is 1.0.

GEM seeds Python's and NumPy's global generators on reset (gem.utils.seeding.set_seed); the driver's generators
are restored around every GEM call, so playing an episode changes no other randomness.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from trainer.config.registries import ENV_CONFIG_BOUNDS, check_env_config
from trainer.envs.base import Env, StepResult

# defaults and ranges, declared once (the reasoning-gym tasks share them)
GUESS, RG = ENV_CONFIG_BOUNDS["game:GuessTheNumber-v0"], ENV_CONFIG_BOUNDS["rg:letter_counting"]
SUCCESS_REWARD = 1.0  # LanguageGameReward.success_reward, and reasoning-gym's score of a correct answer


@contextmanager
def own_rng() -> Iterator[None]:
    """Restore Python's and NumPy's global generator states after the block (module docstring)."""
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def gem_make(env_id: str, **options: Any) -> Any:
    """gem.make, imported here so the registry loads without gem-llm; a clear error when it is not installed."""
    try:
        import gem
    except ImportError:
        raise ValueError(
            f"{env_id} needs the gem-llm package (requirements.txt: gem-llm); pip install 'gem-llm==0.0.4'"
        ) from None
    with own_rng():
        return gem.make(env_id, **options)


def boxed(reply: str) -> str | None:
    """The last \\boxed{...} content of the reply (GEM's own parse), None without one."""
    from gem.utils.parsing import extract_last_boxed_answer

    return extract_last_boxed_answer(reply)


class GemEnv(Env):
    """One GEM environment (module docstring); subclasses name the GEM id and build it."""

    env_id: str = ""

    def __init__(self, **options: Any) -> None:
        self.gem = gem_make(self.env_id, **options)
        self.last = ""

    def _text(self, observation: str, info: dict[str, Any]) -> str:
        suffix = info.get("suffix")
        self.last = f"{observation}\n{suffix}" if suffix else observation
        return self.last

    def reset(self, seed: int) -> str:
        with own_rng():
            observation, info = self.gem.reset(seed=seed)
        return self._text(observation, info)

    def format_ok(self, reply: str, reward: float) -> bool:
        raise NotImplementedError

    def step(self, reply: str) -> StepResult:
        with own_rng():
            observation, reward, terminated, truncated, info = self.gem.step(reply)
        reward = float(reward)
        ok = self.format_ok(reply, reward)
        done = bool(terminated or truncated)
        return StepResult(
            self._text(observation, info),
            reward,
            done,
            {
                "format_ok": ok,
                "success": done and reward == SUCCESS_REWARD,
                "action": boxed(reply) if ok else None,
            },
        )

    def render(self) -> str:
        return self.last


class GuessTheNumber(GemEnv):
    """GEM's game:GuessTheNumber-v0 (its registration: 1..20 in 10 turns). A guess is a number in \\boxed{}."""

    env_id = "game:GuessTheNumber-v0"

    def __init__(
        self,
        min_number: int = GUESS["min_number"].default,
        max_number: int = GUESS["max_number"].default,
        max_turns: int = GUESS["max_turns"].default,
    ) -> None:
        check_env_config(self.env_id, min_number=min_number, max_number=max_number, max_turns=max_turns)
        super().__init__(min_number=min_number, max_number=max_number, max_turns=max_turns)

    def format_ok(self, reply: str, reward: float) -> bool:
        from gem.utils.constants import LanguageGameReward

        return reward != LanguageGameReward.format_error_reward


class ReasoningGym(GemEnv):
    """GEM's rg:<task>: one reasoning-gym question per episode (a single-turn task), drawn by the seed from the
    task's procedural dataset of `size` items generated from `seed` (GEM's defaults 500, 42; nothing downloaded)."""

    task: str = ""

    def __init__(self, size: int = RG["size"].default, seed: int = RG["seed"].default) -> None:
        self.env_id = f"rg:{self.task}"
        check_env_config(self.env_id, size=size, seed=seed)
        super().__init__(size=size, seed=seed)

    def format_ok(self, reply: str, reward: float) -> bool:
        return boxed(reply) is not None


class LetterCounting(ReasoningGym):
    """reasoning-gym's letter_counting: how many times a letter appears in a text span; answer in \\boxed{}."""

    task = "letter_counting"
