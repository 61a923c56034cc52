"""ROLL's CrossThinkQA rule reward (trainer.rewards.crossthinkqa): the answer letter's extraction, ROLL's
loose/soft/strict table (written out here by hand from ROLL's crossthinkqa_reward_fn), the repetition
penalty, and the section's `reward_type: soft` reaching the reward through a loaded config.

How it fails: swap two cells of REWARD_TABLE, drop the `\\boxed{}` preference, or stop passing
scoring_mode from the section (roles.reward) and a case below fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainer.config import validate_config
from trainer.rewards.crossthinkqa import crossthinkqa_score, extract_choice
from trainer.rewards.registry import build_reward
from trainer.roles.reward import build_reward_fn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "config"))
from config_testing import changed

BOXED_RIGHT = r"The options differ in cost. \boxed{B}"
BOXED_WRONG = r"I pick \boxed{C) Paris}"
PLAIN_RIGHT = "After weighing them, the answer is (B) because it is cheaper."
PLAIN_WRONG = "the answer is c, no wait, D."


@pytest.mark.parametrize(("mode", "expected"), [
    ("loose", [1.0, -1.0, 1.0, -1.0]),
    ("soft", [1.0, -0.5, 0.5, -1.0]),
    ("strict", [1.0, -1.0, -1.0, -1.0]),
])
def test_scoring_modes(mode: str, expected: list[float]) -> None:
    responses = [BOXED_RIGHT, BOXED_WRONG, PLAIN_RIGHT, PLAIN_WRONG]
    assert [crossthinkqa_score(r, "B", scoring_mode=mode) for r in responses] == expected


def test_extraction() -> None:
    assert extract_choice(r"\boxed{A} then \boxed{D}") == ("D", True)  # the last box
    assert extract_choice("So the Answer Is: C.") == (": C.", False)  # after the last "answer is", any case
    assert extract_choice("just C") == ("just C", False)
    # the first upper-case character decides: "just C" is C, "the answer is c, no wait, D." is D
    assert crossthinkqa_score("just C", "C", scoring_mode="loose") == 1.0
    assert crossthinkqa_score("nothing upper", "C", scoring_mode="loose") == -1.0


def test_answer_after_think_and_reference_first_letter() -> None:
    response = r"<think>Maybe \boxed{A}?</think>" + "\n" + r"\boxed{B}<|im_end|>"
    assert crossthinkqa_score(response, "B") == 1.0
    assert crossthinkqa_score(r"<think>\boxed{B}</think>no box here", "B") == -1.0  # soft: wrong, unboxed
    assert crossthinkqa_score(BOXED_RIGHT, "B. Lower cost") == 1.0  # ROLL compares the reference's first char


def test_repetition_penalty_and_unknown_mode() -> None:
    # 8 words "x y z x y z x \boxed{B}": trigrams xyz, yzx, zxy, xyz, yzx, zx\boxed -> 4 distinct of 6
    assert crossthinkqa_score(r"x y z x y z x \boxed{B}", "B") == pytest.approx(1.0 - 0.5 * (1 - 4 / 6))
    with pytest.raises(ValueError, match="scoring_mode: 'hard'; valid for crossthinkqa_rule: loose, soft, strict"):
        crossthinkqa_score(BOXED_RIGHT, "B", scoring_mode="hard")
    with pytest.raises(ValueError, match=r"samples\[0\].answer: missing"):
        build_reward("crossthinkqa_rule")(["p"], [BOXED_RIGHT], [{"answer": ""}])


def _config(reward_type: str | None) -> dict:
    section = {"worker_cls": "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker",
               "tag_included": ["crossthinkqa"]}
    if reward_type is not None:
        section["reward_type"] = reward_type
    return changed({"rewards": {"crossthinkqa": section}})


@pytest.mark.parametrize(("reward_type", "expected"), [("soft", 0.5), ("strict", -1.0), ("loose", 1.0), (None, 0.5)])
def test_the_sections_reward_type_reaches_the_reward(reward_type: str | None, expected: float) -> None:
    result = validate_config(_config(reward_type))
    assert not result.errors, result.errors
    score = build_reward_fn(result.config)
    assert score(["q"], [PLAIN_RIGHT], [{"answer": "B", "tag": "crossthinkqa"}]) == [expected]
