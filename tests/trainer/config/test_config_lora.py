"""Validation of ROLL's LoRA keys (decision 0033): LoRA turns on with lora_target; its other knobs, set without
it, are refused; megatron_train refuses it as not built; actor_infer may repeat actor_train's settings only."""

from __future__ import annotations

import pytest
from config_testing import changed

from trainer.config import validate_config

LORA = {"actor_train.model_args.lora_target": "q_proj,v_proj"}


def errors(overrides: dict) -> dict[str, str]:
    result = validate_config(changed(overrides))
    return {issue.path: issue.message for issue in result.errors}


def test_roll_lora_settings_validate() -> None:
    roll = {**LORA, "actor_train.model_args.lora_rank": 32, "actor_train.model_args.lora_alpha": 32,
            "actor_train.model_args.lora_dropout": 0.05, "actor_infer.model_args.lora_target": "q_proj,v_proj",
            "actor_infer.model_args.lora_rank": 32, "actor_infer.model_args.lora_alpha": 32}
    assert errors(roll) == {}


@pytest.mark.parametrize(("knob", "value"), [("lora_rank", 16), ("lora_alpha", 32), ("lora_dropout", 0.1),
                                             ("additional_target", "lm_head"), ("autocast_adapter_dtype", False)])
def test_a_lora_knob_without_lora_target_is_refused(knob: str, value: object) -> None:
    found = errors({f"actor_train.model_args.{knob}": value})
    assert "acts only with lora_target" in found[f"actor_train.model_args.{knob}"]


@pytest.mark.parametrize(("path", "value", "words"), [
    ("actor_train.model_args.lora_rank", 0, "greater than or equal to 1"),
    ("actor_train.model_args.lora_alpha", 0, "greater than or equal to 1"),
    ("actor_train.model_args.lora_dropout", 1.0, "less than 1"),
    ("actor_train.model_args.lora_dropout", -0.1, "greater than or equal to 0"),
    ("actor_train.model_args.lora_target", " , ", "names no module"),
])
def test_bad_values_name_the_field(path: str, value: object, words: str) -> None:
    assert words in errors({**LORA, path: value})[path]


def test_megatron_refuses_lora_as_not_built() -> None:
    result = validate_config(changed({**LORA, "actor_train.strategy_args": {"strategy_name": "megatron_train"}}))
    issue = next(i for i in result.errors if i.path == "actor_train.model_args.lora_target")
    assert issue.kind == "not_built" and "megatron_train" in issue.message


def test_actor_infer_lora_settings_must_match_actor_train() -> None:
    found = errors({**LORA, "actor_infer.model_args.lora_target": "all"})
    assert "differs from actor_train's 'q_proj,v_proj'" in found["actor_infer.model_args.lora_target"]
    found = errors({"actor_infer.model_args.lora_target": "all"})  # the engine serves what actor_train trains
    assert "actor_infer.model_args.lora_target" in found


def test_the_critic_takes_lora_and_the_reference_warns() -> None:
    result = validate_config(changed({"critic.model_args.lora_rank": 4, "adv_estimator": "gae"}))
    assert any(i.path == "critic.model_args.lora_rank" for i in result.errors)
    result = validate_config(changed({**LORA, "reference.model_args.lora_target": "all"}))
    assert result.ok and any(w.path == "reference.model_args.lora_target" and "no effect" in w.message
                             for w in result.warnings)


def test_lora_on_actor_train_alone_over_a_stored_config_is_accepted() -> None:
    """Issue 46 item 5: the platform stores a config with every default written out, so actor_infer "sets"
    lora_target: null and lora_dropout: 0.0; LoRA launched on actor_train alone was refused ("repeat actor_train's
    value or remove it") about those. The engine serves the merged weights: nothing is needed on actor_infer."""
    stored = validate_config(changed({})).config.model_dump(mode="json")
    assert "lora_target" in stored["actor_infer"]["model_args"]  # written out, never set by the user
    result = validate_config(stored, ["actor_train.model_args.lora_target=all", "actor_train.model_args.lora_rank=16",
                                      "actor_train.model_args.lora_alpha=32", "actor_train.model_args.lora_dropout=0.05",
                                      "actor_train.model_args.autocast_adapter_dtype=false"])
    assert [(i.path, i.message) for i in result.errors] == []
    assert result.config.actor_train.model_args.lora_rank == 16
    # a value the user did set on actor_infer, and that differs, is still named
    assert "differs from actor_train's 'all'" in errors({"actor_train.model_args.lora_target": "all",
                                                          "actor_infer.model_args.lora_target": "q_proj"})[
        "actor_infer.model_args.lora_target"]
