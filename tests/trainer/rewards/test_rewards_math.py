"""Rule-based math rewards: answer extraction, numeric equivalence, and the GSM8K-style fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.rewards.math_rule import answers_equal, extract_answer, extract_boxed, math_score
from trainer.rewards.registry import build_reward

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gsm8k_mini.jsonl"


def gsm8k_rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def test_extraction() -> None:
    assert extract_answer("so 3+4=7\n#### 7") == "7"
    assert extract_answer("#### 1\nwait, no\n#### 2") == "2"
    assert extract_answer(r"The area is \boxed{\frac{3}{4}} square units.") == r"\frac{3}{4}"
    assert extract_boxed(r"first \boxed{1} then \boxed{x^{2}+\sqrt{y_{1}}}") == r"x^{2}+\sqrt{y_{1}}"
    assert extract_boxed(r"\boxed{unclosed {") is None
    assert extract_answer("the answer is 12 and then 13") is None  # no fallback by default
    assert extract_answer("the answer is 12 and then -13.5", last_number_fallback=True) == "-13.5"


@pytest.mark.parametrize(("predicted", "reference"), [
    ("1,234", "1234"), ("42.0", "42"), ("3/4", "0.75"), (r"\frac{3}{4}", "3/4"), (r"\dfrac{1}{2}", "0.5"),
    ("-5", "-5.00"), ("$13", "13"), ("50%", "50"), (r"50\%", "50"), (r"\text{7}", "7"), ("12.", "12"),
])
def test_equivalent_answers(predicted: str, reference: str) -> None:
    assert answers_equal(predicted, reference)


@pytest.mark.parametrize(("predicted", "reference"), [
    ("5", "-5"), ("0.74", "0.75"), ("3/4", "4/3"), ("x", "7"), ("1/0", "1"), ("12", "1,2"),
])
def test_different_answers(predicted: str, reference: str) -> None:
    assert not answers_equal(predicted, reference)


def test_percent_as_fraction_is_optional() -> None:
    assert not answers_equal("50%", "0.5")
    assert answers_equal("50%", "0.5", percent_as_fraction=True)


def test_gsm8k_fixture_correct_wrong_and_malformed() -> None:
    rows = gsm8k_rows()
    assert len(rows) == 20
    reward = build_reward("math_rule")
    questions = [r["question"] for r in rows]
    samples = [{"answer": r["answer"]} for r in rows]
    finals = [r["answer"].split("####")[-1].strip() for r in rows]
    correct = [f"Let me think.\nThe result is {f}.\n#### {f}" for f in finals]
    boxed = [f"Therefore the answer is $\\boxed{{{f}}}$." for f in finals]
    wrong = [f"#### {f}1" for f in finals]
    malformed = [f"The answer is {f}" for f in finals]  # no #### and no \boxed
    assert reward(questions, correct, samples) == [1.0] * 20
    assert reward(questions, boxed, samples) == [1.0] * 20
    assert reward(questions, wrong, samples) == [0.0] * 20
    assert reward(questions, malformed, samples) == [0.0] * 20
    lenient = build_reward("math_rule", last_number_fallback=True)
    assert lenient(questions, malformed, samples) == [1.0] * 20
    assert math_score("#### 1200", "#### 1,200") == 1.0


def test_missing_answer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"samples\[0\].answer: missing"):
        build_reward("math_rule")(["q"], ["#### 1"], [{}])
