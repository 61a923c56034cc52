"""Validation and preflight of adapter_name_or_path, freeze_module_prefix and vllm's enable_lora (decision 0042):
bad values are refused before launch naming the field and what would be valid; settings that would not act warn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_testing import changed

from trainer.config import validate_config
from trainer.config.preflight import check_adapters, check_paths
from trainer.config.schema import field_status

LORA = {"actor_train.model_args.lora_target": "q_proj,v_proj", "actor_train.model_args.lora_rank": 4,
        "actor_train.model_args.lora_alpha": 8}
VLLM = {"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"enable_lora": True}}}


def issues(overrides: dict, kind: str = "errors") -> dict[str, str]:
    result = validate_config(changed(overrides))
    return {issue.path: issue.message for issue in getattr(result, kind)}


def test_the_fields_act() -> None:
    from trainer.config.schema import ModelArgs

    assert field_status(ModelArgs, "adapter_name_or_path") == ("acts", "")
    assert field_status(ModelArgs, "freeze_module_prefix") == ("acts", "")


def test_an_adapter_on_every_model_role_validates() -> None:
    adapter = "/adapters/run-7/lora_adapter"
    roles = {f"{role}.model_args.adapter_name_or_path": adapter for role in ("actor_train", "actor_infer", "reference")}
    result = validate_config(changed({**LORA, **roles}))
    assert result.errors == [] and not [w for w in result.warnings if "adapter" in w.path]


def test_actor_infer_serves_actor_trains_adapter() -> None:
    found = issues({"actor_train.model_args.adapter_name_or_path": "/a",
                    "actor_infer.model_args.adapter_name_or_path": "/b"})
    assert "differs from actor_train's '/a'" in found["actor_infer.model_args.adapter_name_or_path"]
    assert "actor_infer.model_args.adapter_name_or_path" in issues({"actor_infer.model_args.adapter_name_or_path": "/b"})


@pytest.mark.parametrize(("overrides", "path", "words"), [
    ({"validation": {"model_args": {"adapter_name_or_path": "/a"}}}, "validation.model_args.adapter_name_or_path",
     "evaluation generates with actor_infer's engine"),
    ({"rewards.math.model_args": {"adapter_name_or_path": "/a"}}, "rewards.math.model_args.adapter_name_or_path",
     "only a reward_model reward loads its model_args adapter"),
    ({**LORA, "actor_train.model_args.freeze_module_prefix": "model.layers.0."},
     "actor_train.model_args.freeze_module_prefix", "no effect with lora_target"),
    ({"reference.model_args": {"freeze_module_prefix": "model.layers.0."}}, "reference.model_args.freeze_module_prefix",
     "this role trains nothing"),
])
def test_settings_that_would_not_act_warn(overrides: dict, path: str, words: str) -> None:
    assert words in issues(overrides, "warnings")[path]


def test_a_forward_only_role_repeating_actor_trains_prefix_is_quiet() -> None:
    prefix = "model.embed_tokens"
    found = issues({"actor_train.model_args.freeze_module_prefix": prefix,
                    "reference.model_args": {"freeze_module_prefix": prefix}}, "warnings")
    assert not [p for p in found if "freeze_module_prefix" in p]


@pytest.mark.parametrize(("overrides", "path", "words"), [
    ({"actor_train.model_args.freeze_module_prefix": "model.norm,"}, "actor_train.model_args.freeze_module_prefix",
     "holds an empty prefix, which would freeze every parameter"),
    ({"actor_train.model_args.adapter_name_or_path": " "}, "actor_train.model_args.adapter_name_or_path", "is empty"),
    (VLLM, "actor_infer.strategy_args.strategy_config.enable_lora", "actor_train trains no LoRA"),
    ({**LORA, **VLLM, "actor_infer.strategy_args.strategy_config.load_format": "dummy"},
     "actor_infer.strategy_args.strategy_config.load_format", "dummy leaves the base weights random"),
    ({**LORA, **VLLM, "actor_train.model_args.additional_target": "lm_head"},
     "actor_infer.strategy_args.strategy_config.enable_lora", "not actor_train's additional_target 'lm_head'"),
    ({**LORA, **VLLM, "actor_train.model_args.lora_rank": 16, "actor_infer.strategy_args.strategy_config.max_lora_rank": 8},
     "actor_infer.strategy_args.strategy_config.max_lora_rank", "8 is below actor_train's lora_rank 16"),
    ({"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"max_lora_rank": 8}}},
     "actor_infer.strategy_args.strategy_config.max_lora_rank", "acts only with enable_lora"),
    ({**LORA, **VLLM, "actor_infer.strategy_args.strategy_config.max_lora_rank": 12},
     "actor_infer.strategy_args.strategy_config.max_lora_rank", "16"),
])
def test_bad_values_are_refused_naming_the_field(overrides: dict, path: str, words: str) -> None:
    assert words in issues(overrides)[path]


def test_megatron_train_refuses_partial_freezing_as_not_built() -> None:
    result = validate_config(changed({"actor_train.model_args.freeze_module_prefix": "model.embed_tokens",
                                      "actor_train.strategy_args": {"strategy_name": "megatron_train"}}))
    issue = next(i for i in result.errors if i.path == "actor_train.model_args.freeze_module_prefix")
    assert issue.kind == "not_built" and "megatron_train" in issue.message


def test_enable_lora_with_actor_trains_lora_validates() -> None:
    assert issues({**LORA, **VLLM}) == {}


def adapter_folder(folder: Path, **config: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, **config}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def test_preflight_reads_the_adapter_folder(tmp_path: Path) -> None:
    field = "actor_train.model_args.adapter_name_or_path"

    def found(folder: Path, **extra: object) -> list[str]:
        config = validate_config(changed({**LORA, field: str(folder), **extra})).config
        return [i.message for i in [*check_paths(config), *check_adapters(config)] if i.path == field]

    assert found(tmp_path / "none") == [f"{str(tmp_path / 'none')!r} does not exist on this machine"]
    (tmp_path / "empty").mkdir()
    assert "holds no adapter_config.json" in found(tmp_path / "empty")[0]
    assert found(adapter_folder(tmp_path / "ok")) == []
    assert found(adapter_folder(tmp_path / "r8", r=8, lora_alpha=16)) == [
        "cannot continue training it: the adapter has rank r=8 but actor_train.model_args.lora_rank gives 4; set "
        "lora_rank: 8",
        "cannot continue training it: the adapter has lora_alpha=16 but actor_train.model_args.lora_alpha gives 8; "
        "set lora_alpha: 16"]
    # a role that merges it only needs a LoRA folder: rank and alpha are the adapter's own
    merged = found(adapter_folder(tmp_path / "r8"), **{"actor_train.model_args.lora_target": None,
                                                        "actor_train.model_args.lora_rank": None,
                                                        "actor_train.model_args.lora_alpha": None})
    assert merged == []
