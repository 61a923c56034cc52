"""Synthetic verifiable tasks: deterministic prompts, dense verifiers, chance level as documented."""

from __future__ import annotations

import random

import pytest

from trainer.config.registries import SYNTHETIC_TASKS
from trainer.data.synthetic import TASKS, char_match_score, get_task


def test_task_names_match_the_config_registry() -> None:
    assert set(TASKS) == set(SYNTHETIC_TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_prompts_are_deterministic_and_verifiable(name: str) -> None:
    task = get_task(name)
    examples = task.make_prompts(50, seed=4)
    assert examples == task.make_prompts(50, seed=4)
    assert examples != task.make_prompts(50, seed=5)
    for ex in examples:
        assert ex["task"] == name and ex["prompt"].endswith("\n")
        assert task.score(ex["answer"], ex["answer"]) == 1.0
        assert task.score(f" {ex['answer']}\n", ex["answer"]) == 1.0  # surrounding whitespace is ignored


def test_answers_follow_the_task_rule() -> None:
    for ex in get_task("reverse").make_prompts(20, seed=0):
        assert ex["answer"] == ex["prompt"].split()[1][::-1]
    for ex in get_task("copy").make_prompts(20, seed=0):
        assert ex["answer"] == ex["prompt"].split()[1]
    for ex in get_task("add").make_prompts(20, seed=0):
        a, b = ex["prompt"].split()[1].split("+")
        assert ex["answer"] == str(int(a) + int(b))


def test_partial_credit_is_dense() -> None:
    assert char_match_score("abc", "abc") == 1.0
    assert char_match_score("abx", "abc") == pytest.approx(0.8 * 2 / 3 + 0.2)
    assert char_match_score("a", "abc") == pytest.approx(0.8 / 3 + 0.2 / 3)
    assert char_match_score("abcxyz", "abc") == pytest.approx(0.8 * 3 / 6 + 0.2 * 3 / 6)  # extra characters cost
    assert char_match_score("xyz", "abc") == pytest.approx(0.2)  # right length, wrong letters
    assert char_match_score("", "abc") == 0.0
    assert char_match_score("abc", "abc", length_weight=0.0) == 1.0


def test_chance_levels_match_the_docstring() -> None:
    """Untrained (random bytes up to response_length 6) ≈ w·|t|/6; right alphabet and length ≈ w + (1-w)/5."""
    rng = random.Random(0)
    examples = get_task("copy").make_prompts(2000, seed=1)

    def mean_score(responses: list[str]) -> float:
        return sum(char_match_score(r, e["answer"]) for r, e in zip(responses, examples, strict=True)) / 2000

    untrained = mean_score(["".join(chr(rng.randrange(33, 256)) for _ in range(6)) for _ in examples])
    alphabet_only = mean_score(["".join(rng.choice("abcde") for _ in range(3)) for _ in examples])
    assert untrained == pytest.approx(0.1, abs=0.01)
    assert alphabet_only == pytest.approx(0.2 + 0.8 / 5, abs=0.02)


def test_bad_kwargs_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"synthetic.kwargs"):
        get_task("copy").make_prompts(2, seed=0, width=3)
    with pytest.raises(ValueError, match=r"synthetic.kwargs: length must be >= 1"):
        get_task("copy").make_prompts(2, seed=0, length=0)
