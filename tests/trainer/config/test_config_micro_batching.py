"""Validation of the token-budget and packing knobs (issue 36; decision 0032): each bad combination is
an error naming the field and what would be valid; a knob on a role whose micro-batches it does not cut
is a warning naming it."""

from __future__ import annotations

import pytest
from config_testing import changed

from trainer.config import validate_config


def issues(changes: dict, kind: str = "errors") -> dict[str, str]:
    result = validate_config(changed(changes))
    return {issue.path: issue.message for issue in getattr(result, kind)}


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"actor_train.use_dynamic_batching_in_train": True},
     "actor_train.max_tokens_per_microbatch_in_train", ["needs", "token budget > 0"]),
    ({"critic.use_dynamic_batching_in_infer": True, "adv_estimator": "gae", "critic.device_mapping": [0]},
     "critic.max_tokens_per_microbatch_in_infer", ["needs", "token budget"]),
    ({"actor_train.use_dynamic_bsz": True}, "actor_train.max_token_len_per_gpu", ["token budget"]),
    ({"actor_train.use_dynamic_bsz": True, "actor_train.max_token_len_per_gpu": 4096,
      "actor_train.use_dynamic_batching_in_train": True, "actor_train.max_tokens_per_microbatch_in_train": 4096},
     "actor_train.use_dynamic_bsz", ["choose one"]),
    ({"actor_train.sequence_packing_args": {"algorithm": "load_balance"}},
     "actor_train.sequence_packing_args.algorithm", ["only with use_sequence_packing"]),
    ({"reference.use_sequence_packing": True, "reference.sequence_packing_args": {"algorithm": "load_balance"},
      "reference.use_dynamic_batching_in_infer": True, "reference.max_tokens_per_microbatch_in_infer": 512},
     "reference.sequence_packing_args.algorithm", ["load_balance and use_dynamic_batching_in_infer", "algorithm none"]),
])
def test_bad_combinations_name_the_field(changes: dict, path: str, words: list[str]) -> None:
    errors = issues(changes)
    assert path in errors, errors
    for word in words:
        assert word in errors[path]


def test_unknown_algorithm_lists_the_valid_ones() -> None:
    errors = issues({"actor_train.use_sequence_packing": True,
                     "actor_train.sequence_packing_args": {"algorithm": "greedy"}})
    message = next(m for p, m in errors.items() if p.startswith("actor_train.sequence_packing_args"))
    assert "none" in message and "load_balance" in message


def test_megatron_says_it_is_not_built_there() -> None:
    """A warning, not a refusal: the cut never changes the gradient, only the speed (RLinf's Megatron files
    set their dynamic batch size and still run)."""
    result = validate_config(changed({"actor_train.strategy_args": {"strategy_name": "megatron_train"},
                                      "actor_train.use_sequence_packing": True}))
    messages = {i.path: i.message for i in result.warnings}
    assert "not built on megatron_train" in messages["actor_train.use_sequence_packing"]
    assert "fsdp2_train" in messages["actor_train.use_sequence_packing"]


@pytest.mark.parametrize(("path", "role_words"), [
    ("actor_infer.use_sequence_packing", "actor_train, critic, reference"),
    ("reference.use_dynamic_batching_in_train", "actor_train, critic"),
])
def test_a_knob_on_a_role_it_does_not_cut_is_a_warning(path: str, role_words: str) -> None:
    result = validate_config(changed({path: True}))
    warnings = {w.path: w.message for w in result.warnings}
    assert "no effect" in warnings[path] and role_words in warnings[path]


@pytest.mark.parametrize("changes", [
    {"actor_train.use_dynamic_batching_in_train": True, "actor_train.max_tokens_per_microbatch_in_train": 4096,
     "actor_train.use_sequence_packing": True},
    {"actor_train.use_dynamic_bsz": True, "actor_train.max_token_len_per_gpu": 4096},
    {"reference.use_sequence_packing": True,
     "reference.sequence_packing_args": {"algorithm": "load_balance", "max_packed_sequence_length_forward": 4096}},
])
def test_good_combinations_validate_without_warnings_about_them(changes: dict) -> None:
    result = validate_config(changed(changes))
    assert result.ok, result.errors
    assert not [w for w in result.warnings if any(k.split(".")[-1] in w.path for k in changes)], result.warnings
