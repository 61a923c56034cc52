"""Validation of ROLL's LoRA keys (decision 0033): LoRA turns on with lora_target; its other knobs, set without
it, are refused; megatron_train trains it on actor_train (decision 0054) but not on a critic nor with
additional_target; actor_infer's settings act only where vLLM serves the adapter (enable_lora), so a difference is
refused there and a no-op warning where the engine gets merged weights."""

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


def test_megatron_trains_actor_lora_but_not_a_critics_nor_additional_target() -> None:
    megatron = {"strategy_name": "megatron_train"}
    assert errors({**LORA, "actor_train.strategy_args": megatron}) == {}
    found = errors({**LORA, "actor_train.strategy_args": megatron, "actor_train.model_args.additional_target": "lm_head"})
    assert "additional_target on megatron_train is not built" in found["actor_train.model_args.additional_target"]
    result = validate_config(changed({"adv_estimator": "gae", "critic.model_args.lora_target": "all",
                                      "critic.strategy_args": megatron}))
    issue = next(i for i in result.errors if i.path == "critic.model_args.lora_target")
    assert issue.kind == "not_built" and "megatron_train critic" in issue.message


@pytest.mark.parametrize("target", ["all-linear", "q_proj,up_proj", "q_proj.*"])
def test_megatron_lora_on_a_mixture_of_experts_model_names_the_attention_override(target: str) -> None:
    moe = {"strategy_name": "megatron_train", "strategy_config": {"moe_grouped_gemm": True}}
    found = errors({"actor_train.model_args.lora_target": target, "actor_train.strategy_args": moe})
    assert "would adapt the experts" in found["actor_train.model_args.lora_target"]
    assert "lora_target=q_proj,k_proj,v_proj,o_proj" in found["actor_train.model_args.lora_target"]
    assert errors({"actor_train.model_args.lora_target": "q_proj,k_proj,v_proj,o_proj",
                   "actor_train.strategy_args": moe}) == {}


def warnings_of(overrides: dict) -> dict[str, str]:
    return {issue.path: issue.message for issue in validate_config(changed(overrides)).warnings}


ENABLE_LORA = {"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"enable_lora": True}}}


def test_actor_infer_lora_settings_act_only_where_vllm_serves_the_adapter() -> None:
    # merged weights: actor_infer's value does nothing, and validation says so
    assert errors({**LORA, "actor_infer.model_args.lora_target": "all"}) == {}
    found = warnings_of({**LORA, "actor_infer.model_args.lora_target": "all", "actor_infer.model_args.lora_rank": 16})
    assert "differs from actor_train's 'q_proj,v_proj', and has no effect" in found["actor_infer.model_args.lora_target"]
    assert "has no effect" in found["actor_infer.model_args.lora_rank"]
    # vLLM serving the adapter: a different value is refused
    found = errors({**LORA, **ENABLE_LORA, "actor_infer.model_args.lora_target": "all"})
    assert "differs from actor_train's 'q_proj,v_proj'" in found["actor_infer.model_args.lora_target"]


@pytest.mark.parametrize("all_linear", ["all-linear", "all"])
def test_all_linear_equals_the_seven_projections_of_a_qwen_or_llama_model(all_linear: str) -> None:
    seven = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    same = {"actor_train.model_args.lora_target": all_linear, "actor_infer.model_args.lora_target": seven}
    assert errors({**same, **ENABLE_LORA}) == {}
    assert "actor_infer.model_args.lora_target" not in warnings_of(same)
    fewer = {**same, "actor_infer.model_args.lora_target": seven.replace(",down_proj", "")}
    assert "actor_infer.model_args.lora_target" in errors({**fewer, **ENABLE_LORA})


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
    # a value the user did set on actor_infer, and that differs, is still named (it has no effect: merged weights)
    assert "differs from actor_train's 'all'" in warnings_of({"actor_train.model_args.lora_target": "all",
                                                              "actor_infer.model_args.lora_target": "q_proj"})[
        "actor_infer.model_args.lora_target"]


def test_expert_parallel_size_1_is_a_dense_model_and_more_is_a_mixture_of_experts() -> None:
    """Dense ROLL files (Qwen2.5) set expert_model_parallel_size: 1; only sharded experts name a MoE model."""
    def megatron(size: int) -> dict:
        return {"strategy_name": "megatron_train", "strategy_config": {"expert_model_parallel_size": size}}

    assert errors({"actor_train.model_args.lora_target": "all-linear", "actor_train.strategy_args": megatron(1)}) == {}
    found = errors({"actor_train.model_args.lora_target": "all-linear", "actor_train.strategy_args": megatron(2)})
    assert "would adapt the experts" in found["actor_train.model_args.lora_target"]
