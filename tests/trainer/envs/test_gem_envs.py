"""GEM environments (gem-llm, trainer.envs.gem) through our env manager, and ROLL's StepConcatEnvManager prompt.

Scripted replies win and lose each environment; the rewards are GEM's own (LanguageGameReward: 0 per hint, 1 on a
win, -0.1 for a reply without a boxed number, which ends the game, 1 − distance/range at the turn limit;
reasoning-gym's score_answer: 1 for the right count, 0 otherwise). How it fails: a wrong reward constant or parse,
success on a lost game, GEM's global seeding leaking into the driver's generators, or a step-concat prompt that is
not ROLL's (the last history_length − 1 observations and the current one, one per line).
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("gem")

from tests.trainer.pipeline.test_agentic_trajectory import TOKENIZER, ScriptedEngine
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.pipeline.trajectory import PlaySetup, Trajectory, chat_format, play
from trainer.rollout.base import SamplingParams

CONCAT = "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager"


def envs(
    env_type: str,
    env_config: dict,
    *,
    cls: str | None = None,
    history_length: int | None = None,
    max_steps: int = 5,
) -> EnvManager:
    spec = CustomEnvConfig(
        env_type=env_type,
        max_steps=max_steps,
        max_tokens_per_step=16,
        env_config=env_config,
        env_manager_cls=cls,
        history_length=history_length,
    )
    return EnvManager(
        "train_env_manager",
        EnvManagerConfig(env_groups=1, group_size=1, tags=["G"]),
        {"G": spec},
        batch_size=1,
        seed=0,
    )


def play_script(manager: EnvManager, replies: list[str]) -> Trajectory:
    setup = PlaySetup(
        ScriptedEngine([[(r, True)] for r in replies]),
        TOKENIZER,
        chat_format(TOKENIZER),
        prompt_length=2048,
        response_length=256,
    )
    (t,) = play(
        setup, manager, manager.episodes(1), SamplingParams(max_new_tokens=16), lambda turn, budget: turn
    )
    return t


def target(manager: EnvManager) -> int:
    env = manager.make_env("G")
    env.reset(manager.episodes(1)[0].seed)
    return env.gem.game_number


GUESS = {"min_number": 1, "max_number": 20, "max_turns": 3}


def test_guess_the_number_win_and_lose_with_gem_rewards() -> None:
    manager = envs("game:GuessTheNumber-v0", GUESS)
    n = target(manager)
    wrong = 1 if n != 1 else 2
    state = random.getstate()
    won = play_script(manager, [rf"\boxed{{{wrong}}}", rf"so \boxed{{{n}}}"])
    assert random.getstate() == state  # GEM's reset seeding stays inside the environment
    assert won.rewards == [0.0, 1.0] and won.success and won.done_reason == "success"
    # the turn limit (env_config.max_turns 3): GEM scores the last guess by its distance
    misses = [m for m in range(1, 21) if m != n][:3]
    lost = play_script(manager, [rf"\boxed{{{m}}}" for m in misses])
    assert lost.rewards == [0.0, 0.0, pytest.approx(1 - abs(misses[-1] - n) / 19)]
    assert not lost.success and lost.done_reason == "failure"
    # no boxed number: GEM's format error ends the game at -0.1
    broken = play_script(manager, ["twelve"])
    assert broken.rewards == [-0.1] and not broken.success and broken.turns[1]["format_ok"] is False


def test_letter_counting_scores_the_boxed_count() -> None:
    manager = envs("rg:letter_counting", {"size": 50, "seed": 7}, max_steps=1)
    env = manager.make_env("G")
    question = env.reset(manager.episodes(1)[0].seed)
    span, letter = " ".join(env.gem.data["metadata"]["span"]), env.gem.data["metadata"]["target_letter"]
    assert f'"{letter}"' in question
    right = sum(ch.lower() == letter for ch in span)  # the count worked out here, not read from GEM's answer
    won = play_script(manager, [rf"\boxed{{{right}}}"])
    lost = play_script(manager, [rf"\boxed{{{right + 1}}}"])
    unboxed = play_script(manager, [str(right)])
    assert (won.rewards, won.success) == ([1.0], True)
    assert (lost.rewards, lost.success) == ([0.0], False)
    assert unboxed.rewards == [0.0] and unboxed.turns[1]["format_ok"] is False


def test_step_concat_prompt_is_the_recent_observations_one_per_line() -> None:
    manager = envs("game:GuessTheNumber-v0", {**GUESS, "max_turns": 5}, cls=CONCAT, history_length=2)
    n = target(manager)
    misses = [m for m in range(1, 21) if m != n][:2]
    t = play_script(manager, [rf"\boxed{{{misses[0]}}}", rf"\boxed{{{misses[1]}}}", rf"\boxed{{{n}}}"])
    assert t.rewards == [0.0, 0.0, 1.0] and len(t.steps) == 3
    user = [
        TOKENIZER.decode(s.prompt_ids).split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        for s in t.steps
    ]
    obs = t.observations
    # history_length 2: one earlier observation, then the current one (GEM's text and suffix)
    assert user == [obs[0], f"{obs[0]}\n{obs[1]}", f"{obs[1]}\n{obs[2]}"]
    assert obs[1].startswith(f"At turn 1, you guessed {misses[0]}") and obs[1].endswith(
        "Enter your next guess."
    )


def test_a_hub_dataset_validates_and_roll_code_is_refused_naming_its_dataset(tmp_path) -> None:
    """roll_math / roll_qa are built (test_gem_dataset_envs.py): a Hugging Face id validates as a model id does,
    and is looked for when the environment is built; ROLL's code environment is still refused by name."""
    from trainer.config import validate_config

    def errors(env_type: str) -> set[str]:
        path = tmp_path / "run.yaml"
        path.write_text(
            f"pipeline: agentic\ncustom_envs:\n  M:\n    env_type: {env_type}\n    env_config:\n"
            "      dataset_name: open-r1/DAPO-Math-17k-Processed\n"
            "train_env_manager:\n  env_groups: 1\n  group_size: 1\n  tags: [M]\n",
            encoding="utf-8",
        )
        return {
            str(issue) for issue in validate_config(path, []).errors if issue.path.startswith("custom_envs.")
        }

    assert errors("roll_math") == set()
    assert any(
        e.startswith("custom_envs.M.env_type: 'roll_code'")
        and "'open-r1/DAPO-Math-17k-Processed'" in e
        and "not built" in e
        for e in errors("roll_code")
    )
