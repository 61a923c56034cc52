"""Validation of ROLL's LLM-as-judge reward fields (issue 36, decision 0039): the fields go together, each
mode names what it needs, unknown prompt names list the valid ones, and what is not built is said."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import changed

from trainer.config import validate_config

JUDGE_CLS = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"
API = {"reward_type": "llm_judge", "judge_model_type": "api", "judge_api_url": "https://judge.example/v1",
       "judge_model_name": "qwen-judge", "judge_api_key": "${oc.env:JUDGE_KEY}"}
INFERENCE = {"worker_cls": JUDGE_CLS, "judge_prompt": "Qwen2.5-7B-Instruct-RLVR-prompt",
             "judge_model_type": "inference", "model_args": {"model_name_or_path": "/models/judge"}}


def issues(judge: dict[str, Any], **more: Any) -> list[tuple[str, str, str]]:
    result = validate_config(changed({"rewards.judge": judge, **more}))
    return [(i.path, i.severity, i.message) for i in result.issues if "judge" in i.path]


@pytest.mark.parametrize("judge", [API, INFERENCE], ids=["api", "inference"])
def test_a_complete_judge_validates_without_a_word(judge: dict[str, Any]) -> None:
    result = validate_config(changed({"rewards.judge": judge}))
    assert result.ok, result.errors
    assert [str(i) for i in result.issues if "judge" in i.path] == []


def test_an_inference_judge_may_use_reward_pretrain() -> None:
    judge = {**INFERENCE, "model_args": {}}
    assert issues(judge, reward_pretrain="/models/judge") == []
    [(path, severity, message)] = issues(judge)
    assert (path, severity) == ("rewards.judge.model_args.model_name_or_path", "error")
    assert "judge_model_type inference" in message and "reward_pretrain" in message


def test_the_mode_is_required() -> None:
    [(path, severity, message)] = issues({"reward_type": "llm_judge"})
    assert (path, severity) == ("rewards.judge.judge_model_type", "error")
    assert "valid: api (judge_api_url, judge_model_name), inference" in message


@pytest.mark.parametrize("missing", ["judge_api_url", "judge_model_name"])
def test_api_needs_the_url_and_the_model_name(missing: str) -> None:
    judge = {k: v for k, v in API.items() if k != missing}
    [(path, severity, message)] = issues(judge)
    assert (path, severity) == (f"rewards.judge.{missing}", "error")
    assert "judge_model_type api needs it" in message


def test_the_url_must_be_http() -> None:
    [(path, _, message)] = issues({**API, "judge_api_url": "judge.example/v1"})
    assert path == "rewards.judge.judge_api_url" and "not an http:// or https:// URL" in message


def test_an_unknown_prompt_name_lists_the_valid_ones() -> None:
    result = validate_config(changed({"rewards.judge": {**API, "judge_prompt": "PERALIGN-RLVR-prompt"}}))
    [error] = [i for i in result.errors if i.path == "rewards.judge.judge_prompt"]
    assert "score-0-10" in error.message and "Qwen2.5-7B-Instruct-RLVR-prompt" in error.message


def test_an_unknown_mode_is_refused() -> None:
    result = validate_config(changed({"rewards.judge": {**API, "judge_model_type": "remote"}}))
    [error] = [i for i in result.errors if i.path == "rewards.judge.judge_model_type"]
    assert "api" in error.message and "inference" in error.message and "cluster" in error.message


def test_a_cluster_judge_without_its_group_is_refused_naming_the_override() -> None:
    result = validate_config(changed({"rewards.judge": {**API, "judge_model_type": "cluster"}}))
    [error] = [i for i in result.errors if i.path == "rewards.judge.judge_model_type"]
    assert "reward_model worker group, which is not set" in error.message
    assert "override rewards.judge.judge_model_type=inference" in error.message


def test_an_inference_judge_runs_on_hf_infer_or_vllm_only() -> None:
    result = validate_config(changed({"rewards.judge": {**INFERENCE, "strategy_args": {"strategy_name": "vllm"}}}))
    assert not [i for i in result.errors if i.path.startswith("rewards.judge")]  # decision 0044
    result = validate_config(changed({"rewards.judge": {**INFERENCE,
                                                        "strategy_args": {"strategy_name": "deepspeed_infer"}}}))
    [error] = [i for i in result.errors if i.path == "rewards.judge.strategy_args.strategy_name"]
    assert error.kind == "not_built" and "valid: hf_infer, vllm" in error.message


def test_judge_fields_elsewhere_have_no_effect() -> None:
    found = issues({"reward_type": "math_rule", "judge_model_type": "api", "judge_api_url": "https://x/v1"},
                   **{"rewards.math": {"reward_type": "math_rule"}})
    assert {(p, s) for p, s, _ in found} == {("rewards.judge.judge_model_type", "warning"),
                                             ("rewards.judge.judge_api_url", "warning")}
    assert all("not an llm_judge reward" in m for _, _, m in found)
    found = issues({**INFERENCE, "judge_api_url": "https://x/v1"})
    assert found == [("rewards.judge.judge_api_url", "warning",
                      "has no effect: judge_model_type inference runs the section's own model, not an API")]


def test_roll_response_filter_and_reward_system_plugins_say_what_they_are() -> None:
    result = validate_config(changed({"rewards.math.response_filter_config": {"type": "std_filter"},
                                      "rewards.math.reward_manager_config": [{"plugin_name": "math_verify"}]}))
    warned = {i.path: i.message for i in result.warnings}
    assert "no effect" in warned["rewards.math.response_filter_config"]
    assert "not built yet" in warned["rewards.math.reward_manager_config"]
    assert "RemoteRewardSystemWorker" in warned["rewards.math.reward_manager_config"]


def test_a_reward_world_size_says_it_has_no_effect() -> None:
    """ROLL's rewards.<name>.world_size starts that many reward processes; here the driver scores every domain."""
    assert issues({**API, "world_size": 1}) == []
    [(path, severity, message)] = issues({**API, "world_size": 32})
    assert (path, severity) == ("rewards.judge.world_size", "warning")
    assert message.startswith("has no effect") and "32 worker processes" in message
