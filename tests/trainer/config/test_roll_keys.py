"""ROLL's key set is ours (issue 43): what ROLL hands to an engine or drops is a warning saying what happens; what
ROLL reads and PolicyLab lacks, and typos, are errors naming their override; one pass reports every error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from config_testing import changed

from trainer.config import validate_config
from trainer.config.issues import ConfigIssue, ValidationResult
from trainer.config.loading import load_raw
from trainer.config.roll_keys import ROLL_FIELDS, engine_arguments

INFER_CFG = "actor_infer.strategy_args.strategy_config"
MEG_CFG = "actor_train.strategy_args.strategy_config"
VLLM = {"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"max_model_len": 256}}}
MEG = {"actor_train.strategy_args.strategy_name": "megatron_train"}
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_MCORE = importlib.util.find_spec("megatron") is not None


def issue_at(result: ValidationResult, path: str) -> ConfigIssue:
    found = [i for i in result.issues if i.path == path]
    assert len(found) == 1, [str(i) for i in result.issues]
    return found[0]


def test_roll_fields_are_rolls_dataclasses() -> None:
    # spot checks against roll/configs/*.py at ROLL_COMMIT (read by hand, not from the table)
    assert "postive_loss_coef" in ROLL_FIELDS["top"] and "eval_steps" in ROLL_FIELDS["top"]
    assert "eval_steps" not in ROLL_FIELDS["worker"]
    assert {"norm_mean_type", "norm_std_type"} <= ROLL_FIELDS["reward_normalization"]


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")
def test_a_vllm_argument_under_strategy_config_is_a_warning_naming_the_engine() -> None:
    # optimization_level: vLLM's EngineArgs field, set by 5 ROLL examples
    result = validate_config(changed({**VLLM, f"{INFER_CFG}.optimization_level": 3}))
    assert result.ok, [str(i) for i in result.errors]
    issue = issue_at(result, f"{INFER_CFG}.optimization_level")
    assert issue.severity == "warning" and "an argument of vLLM (installed vllm" in issue.message
    assert "no effect here" in issue.message and INFER_CFG not in issue.message  # the path is said once
    assert "optimization_level" in engine_arguments("vLLM")[1]


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed")
def test_a_key_the_installed_vllm_does_not_take_is_a_warning_saying_so() -> None:
    result = validate_config(changed({**VLLM, f"{INFER_CFG}.cuda_graph_sizes": [1, 2]}))
    assert result.ok
    assert "not an argument of the installed" in issue_at(result, f"{INFER_CFG}.cuda_graph_sizes").message


@pytest.mark.skipif(not HAS_MCORE, reason="megatron-core is not installed")
def test_a_megatron_transformer_config_key_is_a_warning_not_a_self_contradiction() -> None:
    result = validate_config(changed({**MEG, f"{MEG_CFG}.bf16": True, f"{MEG_CFG}.apply_rope_fusion": True}))
    for key in ("bf16", "apply_rope_fusion"):
        issue = issue_at(result, f"{MEG_CFG}.{key}")
        assert issue.severity == "warning" and "megatron-core" in issue.message, issue
        assert "belongs in" not in issue.message


def test_a_misspelt_typed_engine_key_stays_an_error_with_its_removal_override() -> None:
    result = validate_config(changed({**VLLM, f"{INFER_CFG}.gpu_memory_utilisation": 0.5}))
    issue = issue_at(result, f"{INFER_CFG}.gpu_memory_utilisation")
    assert issue.severity == "error" and "did you mean gpu_memory_utilization?" in issue.message
    assert issue.message.endswith(f"override ~{INFER_CFG}.gpu_memory_utilisation")


def test_a_key_roll_declares_elsewhere_is_a_warning_and_a_typo_an_error() -> None:
    # validation.eval_steps (ROLL's BaseConfig has eval_steps at the top; its WorkerConfig drops it)
    result = validate_config(changed({"validation.eval_steps": 5, "actor_train.training_args.lerning_rate": 1e-6}))
    moved = issue_at(result, "validation.eval_steps")
    assert moved.severity == "warning" and "ROLL ignores it here" in moved.message
    typo = issue_at(result, "actor_train.training_args.lerning_rate")
    assert typo.severity == "error" and "did you mean learning_rate?" in typo.message
    assert typo.message.endswith("override ~actor_train.training_args.lerning_rate")


def test_every_error_in_one_pass() -> None:
    # a schema error (bad template) used to hide the rule error (max_new_tokens) and the engine error (sglang)
    result = validate_config(changed({
        "actor_train.data_args.template": "qwen9",
        "actor_infer.generating_args.max_new_tokens": 4096,
        "actor_infer.strategy_args": {"strategy_name": "sglang", "strategy_config": {}},
    }))
    paths = {i.path for i in result.errors}
    assert {"actor_train.data_args.template", "actor_infer.generating_args.max_new_tokens",
            "actor_infer.strategy_args.strategy_name"} <= paths, [str(i) for i in result.errors]


ROLL_AGENTIC = """
defaults:
  - ./my_envs@_here_
custom_envs:
  SimpleSokoban:
    ${custom_env.SimpleSokoban}
"""
ENVS = """
custom_env:
  SimpleSokoban:
    env_type: sokoban
    history_length: 3
"""


def test_an_override_reaches_into_a_section_that_is_an_interpolation(tmp_path: Path) -> None:
    (tmp_path / "my_envs.yaml").write_text(ENVS)
    (tmp_path / "run.yaml").write_text(ROLL_AGENTIC)
    raw = load_raw(tmp_path / "run.yaml", ["~custom_envs.SimpleSokoban.history_length"])
    assert raw["custom_envs"]["SimpleSokoban"] == {"env_type": "sokoban"}


def test_a_missing_defaults_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(ROLL_AGENTIC)
    result = validate_config(tmp_path / "run.yaml")
    assert not result.ok  # ${custom_env.SimpleSokoban} has nothing to read
    assert any(i.path == "defaults.0" and "'./my_envs' not found" in i.message for i in result.issues), result.issues


def test_removing_a_reward_domain_renormalises_the_others(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(
        "actor_train:\n  data_args:\n    domain_interleave_probs: {math: 0.4, code: 0.3, ifeval: 0.1}\n"
        "rewards:\n  math: {reward_type: math_rule}\n  code: {reward_type: math_rule}\n"
        "  ifeval: {reward_type: math_rule}\n")
    raw = load_raw(tmp_path / "run.yaml", ["~rewards.ifeval"])
    assert raw["actor_train"]["data_args"]["domain_interleave_probs"] == pytest.approx({"math": 4 / 7, "code": 3 / 7})
