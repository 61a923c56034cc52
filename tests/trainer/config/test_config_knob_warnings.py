"""Validation says when a KL / policy-loss / evaluation knob will not act as set (issue 11)."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import changed

from trainer.config import validate_config

# (id, changes, path, severity, words that must appear in the message)
CASES: list[tuple[str, dict[str, Any], str, str, list[str]]] = [
    ("adaptive_needs_target", {"kl_ctrl_type": "adaptive", "add_token_level_kl": True}, "target_kl", "error",
     ["target_kl"]),
    ("fixed_ignores_target", {"kl_ctrl_type": "fixed", "target_kl": 0.1, "add_token_level_kl": True}, "target_kl",
     "warning", ["unused", "kl_ctrl_type: adaptive"]),
    ("controller_without_kl_in_reward", {"target_kl": 0.1}, "target_kl", "warning", ["add_token_level_kl"]),
    ("gspo_wide_clip", {"policy_loss": "gspo"}, "pg_clip", "warning", ["3.0e-4", "4.0e-4"]),
    ("gspo_dual_clip", {"policy_loss": "gspo", "pg_clip": 3e-4, "dual_clip_loss": True}, "dual_clip_loss",
     "warning", ["unused", "gspo"]),
    ("greedy_repeats", {"val_greedy": True, "val_n_sample": 4}, "val_n_sample", "warning", ["same response 4"]),
    ("topr_two_spellings", {"actor_train.pg_variant": "topr", "use_topr_loss": True}, "actor_train.pg_variant",
     "error", ["use_topr_loss", "choose one"]),
    ("topr_replaces_gspo", {"actor_train.pg_variant": "topr", "policy_loss": "gspo"}, "actor_train.pg_variant",
     "error", ["gspo"]),
    ("topr_weight_without_topr", {"actor_train.topr_negative_weight": 0.5}, "actor_train.topr_negative_weight",
     "warning", ["no effect", "pg_variant: topr"]),
    ("topr_weight_on_another_role", {"reference.pg_variant": "topr"}, "reference.pg_variant", "warning",
     ["no effect", "actor_train"]),
    ("pg_variant_not_built", {"actor_train.pg_variant": "cispo"}, "actor_train.pg_variant", "error",
     ["not built", "ppo, topr"]),
]


@pytest.mark.parametrize(("changes", "path", "severity", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_knob_issue(changes: dict[str, Any], path: str, severity: str, words: list[str]) -> None:
    result = validate_config(changed(changes))
    matching = [i for i in result.issues if i.path == path and i.severity == severity]
    assert matching, f"no {severity} at {path}; got {[str(i) for i in result.issues]}"
    message = " ".join(i.message for i in matching)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize("changes", [
    {"kl_ctrl_type": "adaptive", "target_kl": 0.1, "add_token_level_kl": True},
    {"target_kl": 0.1, "add_token_level_kl": True},  # unset type: ROLL's rule makes it adaptive
    {"policy_loss": "gspo", "pg_clip_low": 3e-4, "pg_clip_high": 4e-4},
    {"actor_train.pg_variant": "topr", "actor_train.topr_negative_weight": 0.5},
    {"use_topr_neg_loss_coef": 0.5},
    {"val_greedy": True},
])
def test_acting_settings_raise_no_issue(changes: dict[str, Any]) -> None:
    result = validate_config(changed(changes))
    flagged = [str(i) for i in result.issues if i.path in {"target_kl", "pg_clip", "dual_clip_loss", "val_n_sample"}]
    assert not flagged
