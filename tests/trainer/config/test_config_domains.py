"""Validation of dataset_filter and domain_interleave_probs before launch (docs/decisions/0043)."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import changed

from trainer.config import validate_config

PROBS = "actor_train.data_args.domain_interleave_probs"


def issues(changes: dict[str, Any], kind: str = "errors") -> list[tuple[str, str]]:
    result = validate_config(changed(changes))
    return [(i.path, i.message) for i in getattr(result, kind)]


@pytest.mark.parametrize(("probs", "words"), [
    ({"math": 0.5, "code": 0.6}, "sum to 1.1; they must sum to at most 1"),
    ({"math": 1.5, "code": -0.5}, "math: 1.5, code: -0.5: each probability must be in (0, 1]"),
    ({}, "no domain listed"),
])
def test_probabilities_must_be_positive_and_sum_to_at_most_one(probs: dict[str, float], words: str) -> None:
    errors = issues({PROBS: probs})
    assert [path for path, _ in errors] == [PROBS] and words in errors[0][1]


def test_a_sum_below_one_gives_the_last_domain_the_rest_as_roll_does() -> None:
    # ROLL's own multi-domain files list 0.4 + 0.3 + 0.1 + 0.1: int(0.5 * 8) = 4 math, code takes the other 4
    result = validate_config(changed({PROBS: {"math": 0.5, "code": 0.4}}))
    assert result.ok, result.errors
    assert any(i.path == PROBS and "splits as math 4, code 4" in i.message for i in result.warnings)


def test_a_domain_the_rounding_leaves_without_a_prompt_is_an_error_with_the_batch_size_that_fits() -> None:
    # rollout_batch_size 8: int(0.1 * 8) = 0 prompts of math; the first size giving it one is 10
    errors = issues({PROBS: {"math": 0.1, "code": 0.9}})
    assert errors == [(PROBS, "math would get no prompt in a batch of rollout_batch_size 8 (math 0, code 8; ROLL's "
                              "rounding gives every domain but the last listed int(p x rollout_batch_size) prompts "
                              "and the last the rest): raise rollout_batch_size to at least 10, or raise their "
                              "probability")]


def test_an_inexact_split_is_explained_and_an_exact_one_is_silent() -> None:
    assert issues({PROBS: {"a": 0.5, "b": 0.3, "c": 0.2}}) == []
    assert issues({PROBS: {"a": 0.5, "b": 0.3, "c": 0.2}}, "warnings") == [
        (PROBS, "a batch of 8 prompts splits as a 4, b 2, c 2, not exactly in these proportions: ROLL's rounding "
                "gives every domain but the last listed int(p x rollout_batch_size) prompts and the last the rest")]
    assert issues({PROBS: {"a": 0.75, "b": 0.25}}, "warnings") == []


def test_replacement_prompts_are_refused_with_domains() -> None:
    refill = {"is_use_additional_prompts": True, "max_additional_running_prompts": 8,
              "rewards.synthetic": {"reward_type": "synthetic", "query_filter_config": {
                  "type": "std_filter", "filter_args": {"std_threshold": 0}}}}
    assert issues(refill) == []
    errors = issues({**refill, PROBS: {"a": 0.5, "b": 0.5}})
    assert [p for p, _ in errors] == ["is_use_additional_prompts"]
    assert "not drawn per domain here" in errors[0][1]


def test_whole_batch_normalisation_with_several_domains_is_flagged() -> None:
    warnings = issues({PROBS: {"a": 0.5, "b": 0.5}, "norm_mean_type": "batch", "whiten_advantages": True}, "warnings")
    assert warnings == [(PROBS, "ROLL normalises each domain's rewards and advantages apart (batch and running "
                                "statistics per domain); here the whole batch is normalised together (norm_mean_type, "
                                "whiten_advantages)")]
    assert issues({PROBS: {"a": 1.0}, "norm_mean_type": "batch"}, "warnings") == []


def test_probabilities_outside_actor_train_have_no_effect() -> None:
    warnings = issues({"validation": {"data_args": {"domain_interleave_probs": {"a": 1.0}}}}, "warnings")
    assert ("validation.data_args.domain_interleave_probs", "has no effect: only "
            "actor_train.data_args.domain_interleave_probs splits the training batches") in warnings


@pytest.mark.parametrize(("value", "path", "words"), [
    ({"source": "deepmath", "min_difficulty": 8, "max_difficulty": 3}, "dataset_filter",
     "min_difficulty 8.0 is above max_difficulty 3.0"),
    ({"num_samples": -1}, "dataset_filter.num_samples", "greater than or equal to 0"),
    ({"min_dificulty": 3}, "dataset_filter.min_dificulty", "did you mean min_difficulty?"),
    ({"level": [3, 8]}, "dataset_filter.level", "valid keys here: max_difficulty, min_difficulty, num_samples, "
                                                "source"),
])
def test_a_bad_dataset_filter_is_refused_naming_the_field(value: dict[str, Any], path: str, words: str) -> None:
    errors = issues({"dataset_filter": value})
    assert [p for p, _ in errors] == [path] and words in errors[0][1]


def test_roll_keys_of_dataset_filter_validate_without_a_not_built_warning() -> None:
    value = {"source": "deepmath", "min_difficulty": 3, "max_difficulty": 8, "num_samples": 10000}
    assert issues({"dataset_filter": value}) == []
    assert not [w for w in issues({"dataset_filter": value}, "warnings") if w[0].startswith("dataset_filter")]
