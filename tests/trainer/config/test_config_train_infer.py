"""Validation of ROLL's train_infer_correction and use_policy_loss_type (decision 0040): ROLL's key names only
(an unknown key names the valid ones), bands that can pass a token, the engine's log-probs beside actor_train's,
and one policy objective at a time."""

from __future__ import annotations

import pytest
from config_testing import changed

from trainer.config import validate_config
from trainer.config.schema import PipelineConfig

FILTER = {"enabled": True, "agg_type": "token", "ratio_enabled": True, "ratio_low": 0.8, "ratio_high": 1.2,
          "diff_enabled": False}


def issues(overrides: dict) -> tuple[dict[str, str], dict[str, str]]:
    result = validate_config(changed(overrides))
    return ({i.path: i.message for i in result.errors}, {i.path: i.message for i in result.warnings})


def test_roll_sections_validate_and_are_typed() -> None:
    section = {"is_weight": {"enabled": True, "weight_type": "geometric", "upper_bound": 2.0, "detach": True},
               "filters": [FILTER, {**FILTER, "agg_type": "segment", "ratio_enabled": False, "diff_enabled": True}]}
    assert issues({"train_infer_correction": section}) == ({}, {})
    config = PipelineConfig.model_validate(changed({"train_infer_correction": section}))
    assert config.train_infer_correction.filters[1].agg_type == "segment" and config.train_infer_correction.acts()
    assert not PipelineConfig.model_validate(changed({})).train_infer_correction.acts()
    assert not PipelineConfig.model_validate(changed({"train_infer_correction": {"is_weight": {"enabled": False}}})
                                             ).train_infer_correction.acts()


@pytest.mark.parametrize(("section", "path", "words"), [
    ({"is_weight": {"weight_typ": "token"}}, "train_infer_correction.is_weight.weight_typ", ["weight_type"]),
    ({"filters": [{"enabled": True, "bogus": 1}]}, "train_infer_correction.filters.0.bogus",
     ["valid keys here", "agg_type", "ratio_high"]),
    ({"rs_mode": "token"}, "train_infer_correction.rs_mode", ["valid keys here: filters, is_weight"]),
    ({"is_weight": {"weight_type": "turn"}}, "train_infer_correction.is_weight.weight_type", ["segment", "geometric"]),
    ({"is_weight": {"upper_bound": 0}}, "train_infer_correction.is_weight.upper_bound", ["greater than 0"]),
    ({"filters": [{**FILTER, "ratio_low": 1.3}]}, "train_infer_correction.filters.0", ["ratio_low 1.3 > ratio_high"]),
    ({"filters": [{**FILTER, "diff_low": 0.1, "diff_high": -0.1}]}, "train_infer_correction.filters.0", ["diff_low"]),
])
def test_a_bad_section_is_refused_naming_the_field(section: dict, path: str, words: list[str]) -> None:
    found, _ = issues({"train_infer_correction": section})
    assert path in found, found
    for word in words:
        assert word in found[path]


def test_it_needs_the_engines_log_probs_beside_actor_trains() -> None:
    found, _ = issues({"train_infer_correction": {"filters": [FILTER]}, "use_rollout_log_probs": True})
    assert "use_rollout_log_probs" in found["train_infer_correction"]
    assert issues({"train_infer_correction": {"filters": [{**FILTER, "enabled": False}]},
                   "use_rollout_log_probs": True})[0] == {}  # a disabled filter needs nothing


def test_settings_that_change_nothing_are_warnings() -> None:
    found, warned = issues({"train_infer_correction": {
        "is_weight": {"weight_type": "sequence"},
        "filters": [{"enabled": False, "ratio_low": 0.5}, {**FILTER, "ratio_enabled": False}]}})
    assert found == {}
    assert "is_weight.enabled is false" in warned["train_infer_correction.is_weight.weight_type"]
    assert "off" in warned["train_infer_correction.filters.0.enabled"]
    assert "keeps every token" in warned["train_infer_correction.filters.1"]
    _, warned = issues({"train_infer_correction": {"is_weight": {"detach": False}}})
    assert "no effect" in warned["train_infer_correction.is_weight.detach"]


def test_vllm_truncated_sampling_is_flagged() -> None:
    vllm = {"actor_infer.strategy_args": {"strategy_name": "vllm"}, "train_infer_correction": {"filters": [FILTER]}}
    _, warned = issues({**vllm, "actor_infer.generating_args.top_p": 0.9})
    assert "top_p" in warned["train_infer_correction"] and "kept mass" in warned["train_infer_correction"]
    assert "train_infer_correction" not in issues(vllm)[1]


def test_pg_replaces_the_objective_and_flags_what_it_ignores() -> None:
    assert issues({"use_policy_loss_type": "PG"})[0] == {}
    for rival in ({"policy_loss": "gspo"}, {"use_topr_loss": True}, {"actor_train.pg_variant": "topr"}):
        found, _ = issues({"use_policy_loss_type": "PG", **rival})
        assert "replaces the policy objective" in found["use_policy_loss_type"], rival
    _, warned = issues({"use_policy_loss_type": "PG", "pg_clip": 0.3, "dual_clip_loss": True})
    assert "no ratio to clip" in warned["pg_clip"] and "dual clip" in warned["dual_clip_loss"]
    # BASE: 32 samples in optimizer steps of 8 → 4 steps, the last three off-policy for PG
    assert "4 optimizer steps" in warned["use_policy_loss_type"]
