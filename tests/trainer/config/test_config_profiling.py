"""Validation of ROLL's profiling keys and PolicyLab's profiler_steps (decision 0037): the range is [first, last]
with 1 <= first <= last, one profiling mode at a time (ROLL asserts it), and a range past max_steps is refused
when profiling is on (it would profile nothing)."""

from __future__ import annotations

import pytest
from config_testing import changed

from trainer.config import validate_config


def errors(overrides: dict) -> dict[str, str]:
    result = validate_config(changed(overrides))
    return {issue.path: issue.message for issue in result.errors}


def test_roll_profiling_settings_validate_with_the_default_range() -> None:
    assert errors({"profiler_timeline": True}) == {}
    assert errors({"profiler_memory": True, "profiler_output_dir": "prof", "profiler_steps": [5, 9]}) == {}


@pytest.mark.parametrize("steps", [[3, 2], [0, 1], [-1, 2], [2], [], [1, 2, 3]])
def test_a_range_that_is_not_first_to_last_is_refused(steps: list[int]) -> None:
    found = errors({"profiler_timeline": True, "profiler_steps": steps})
    assert "profiler_steps" in found and "1 <= first <= last" in found["profiler_steps"]


def test_a_bad_range_is_refused_even_with_profiling_off() -> None:
    assert "profiler_steps" in errors({"profiler_steps": [4, 1]})


def test_a_range_that_is_not_integers_names_the_field() -> None:
    assert "profiler_steps.0" in errors({"profiler_steps": ["two", 3]})


def test_both_modes_at_once_are_refused_as_in_roll() -> None:
    found = errors({"profiler_timeline": True, "profiler_memory": True})
    assert "one profiling mode at a time" in found["profiler_memory"]


def test_a_range_after_the_last_step_is_refused_only_when_profiling() -> None:
    found = errors({"profiler_timeline": True, "max_steps": 1})
    assert "starts after the last step" in found["profiler_steps"] and "[1, 1]" in found["profiler_steps"]
    assert errors({"max_steps": 1}) == {}  # the default range, profiling off: nothing to say
    assert errors({"profiler_timeline": True, "max_steps": 3, "profiler_steps": [2, 50]}) == {}  # cut at the end
