"""Validation of dynamic sampling and the query filters (issue 36): a config that validates runs, and a
set knob acts or is flagged."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import changed

from trainer.config import validate_config

STD0 = {"rewards.math.query_filter_config": {"type": "std_filter", "filter_args": {"std_threshold": 0.0}}}


def _issues(changes: dict[str, Any], path: str) -> list[tuple[str, str]]:
    return [(i.severity, i.message) for i in validate_config(changed(changes)).issues if i.path == path]


def test_replacement_prompts_with_a_filter_in_sync_rollout_raise_nothing() -> None:
    result = validate_config(changed({**STD0, "is_use_additional_prompts": True}))
    assert result.ok
    assert [str(i) for i in result.issues if "prompts" in i.path or "query_filter" in i.path] == []


def test_replacement_prompts_without_a_filter_are_flagged() -> None:
    [(severity, message)] = _issues({"is_use_additional_prompts": True}, "is_use_additional_prompts")
    assert severity == "warning" and "no effect" in message and "std_filter" in message


def test_replacement_prompts_are_refused_with_async_rollout() -> None:
    issues = _issues({**STD0, "is_use_additional_prompts": True, "rollout_mode": "one_step_off",
                      "async_generation_ratio": 1}, "is_use_additional_prompts")
    assert [s for s, _ in issues] == ["error"] and "sync" in issues[0][1]


def test_a_zero_budget_is_flagged() -> None:
    issues = _issues({**STD0, "is_use_additional_prompts": True, "max_additional_running_prompts": 0},
                     "max_additional_running_prompts")
    assert [s for s, _ in issues] == ["warning"]


@pytest.mark.parametrize(("rule", "bad"), [({"type": "std_filter", "filter_args": {"std": 0.0}}, "std"),
                                           ({"type": "mean_filter", "filter_args": {"std_threshold": 0.0}},
                                            "std_threshold")])
def test_filter_arguments_the_filter_does_not_read_are_refused(rule: dict[str, Any], bad: str) -> None:
    issues = _issues({"rewards.math.query_filter_config": rule}, "rewards.math.query_filter_config.filter_args")
    assert [s for s, _ in issues] == ["error"] and bad in issues[0][1]


@pytest.mark.parametrize("path", ["max_len_mask", "error_max_len_clip", "is_use_additional_prompts",
                                  "rewards.math.response_length_penalty_coef", "actor_train.topr_positive_weight",
                                  "use_topr_neg_loss_coef"])
def test_the_built_knobs_are_no_longer_reported_as_inactive(path: str) -> None:
    value = 0.5 if path.endswith(("coef", "weight")) else True
    extra = {**STD0, "actor_train.pg_variant": "topr"}
    messages = [m for _, m in _issues({**extra, path: value}, path)]
    assert not any("not built" in m or "has no effect" in m for m in messages), messages
