"""Every validation rule: the issue names the field path and says what would be valid."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import DELETE, base, changed

from trainer.config import ConfigError, ConfigIssue, load_config, validate_config

MEG = {"actor_train.strategy_args.strategy_name": "megatron_train"}
MEG_CFG = "actor_train.strategy_args.strategy_config"
INFER_CFG = "actor_infer.strategy_args.strategy_config"
VLLM = {"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"max_model_len": 256}}}
SOKOBAN_ENV = {"custom_envs": {"Sokoban": {"env_type": "sokoban"}}}

# (id, changes, path, severity, words that must appear in the message)
RULES: list[tuple[str, dict[str, Any], str, str, list[str]]] = [
    # batch arithmetic
    ("batch_accumulation", {"actor_train.training_args.gradient_accumulation_steps": 3},
     "actor_train.training_args.gradient_accumulation_steps", "error",
     ["8 × 4 = 32", "2 × 3 × 1 = 6", "gradient_accumulation_steps = 2 works", "16 gives one step"]),
    ("batch_micro", {"actor_train.training_args.per_device_train_batch_size": 3},
     "actor_train.training_args.per_device_train_batch_size", "error", ["must divide 32"]),
    ("batch_dp", {"actor_train.device_mapping": [0, 1, 2]},
     "rollout_batch_size", "error", ["data-parallel size 3", "multiple of 3"]),
    ("batch_megatron_dp", {**MEG, "actor_train.device_mapping": [0, 1, 2, 3], f"{MEG_CFG}.tensor_model_parallel_size": 2,
                           "actor_train.training_args.gradient_accumulation_steps": 16},
     "actor_train.training_args.gradient_accumulation_steps", "error", ["2 × 16 × 2 = 64"]),
    ("batch_critic", {"adv_estimator": "gae", "critic": {"training_args": {"gradient_accumulation_steps": 5}}},
     "critic.training_args.gradient_accumulation_steps", "error", ["× 5 ×"]),
    # devices and parallel sizes
    ("world_size_mismatch", {"actor_train.world_size": 2}, "actor_train.world_size", "error",
     ["device_mapping gives 1"]),
    ("tp_divides", {**MEG, "actor_train.device_mapping": [0, 1, 2], f"{MEG_CFG}.tensor_model_parallel_size": 2,
                    "rollout_batch_size": 12},
     f"{MEG_CFG}.tensor_model_parallel_size", "error", ["does not divide the role's 3 devices"]),
    ("ep_divides", {**MEG, "actor_train.device_mapping": [0, 1], f"{MEG_CFG}.expert_model_parallel_size": 4},
     f"{MEG_CFG}.expert_model_parallel_size", "error", ["does not divide the role's 2 devices"]),
    ("vpp_needs_pp", {**MEG, f"{MEG_CFG}.virtual_pipeline_model_parallel_size": 2},
     f"{MEG_CFG}.virtual_pipeline_model_parallel_size", "error", ["pipeline_model_parallel_size > 1"]),
    ("sequence_parallel_tp1", {**MEG, f"{MEG_CFG}.sequence_parallel": True},
     f"{MEG_CFG}.sequence_parallel", "warning", ["tensor_model_parallel_size 1"]),
    ("vllm_tp_divides", {**VLLM, "actor_infer.device_mapping": [0, 1, 2], f"{INFER_CFG}.tensor_parallel_size": 2},
     f"{INFER_CFG}.tensor_parallel_size", "error", ["needs 2 devices", "3"]),
    ("gpus_per_worker_divides", {"actor_infer.strategy_args": {"strategy_name": "hf_infer"},
                                 "actor_infer.device_mapping": [0, 1, 2], "actor_infer.num_gpus_per_worker": 2},
     "actor_infer.num_gpus_per_worker", "error", ["divisor of 3"]),
    ("fsdp_size_divides", {"actor_train.device_mapping": [0, 1], "actor_train.strategy_args.strategy_config":
                           {"fsdp_size": 3}},
     "actor_train.strategy_args.strategy_config.fsdp_size", "error", ["does not divide the role's 2"]),
    ("ulysses_divides", {"actor_train.device_mapping": [0, 1], "actor_train.strategy_args.strategy_config":
                         {"ulysses_sequence_parallel_size": 4}},
     "actor_train.strategy_args.strategy_config.ulysses_sequence_parallel_size", "error", ["role's 2 ranks"]),
    ("device_outside_cluster", {"actor_train.device_mapping": [8], "num_nodes": 1}, "actor_train.device_mapping",
     "error", ["[8]", "0..7"]),
    ("device_negative", {"actor_train.device_mapping": [-1]}, "actor_train.device_mapping", "error", [">= 0"]),
    ("device_duplicate", {"actor_train.device_mapping": [0, 0]}, "actor_train.device_mapping", "error",
     ["[0] more than once"]),
    ("device_empty", {"actor_train.device_mapping": []}, "actor_train.device_mapping", "error", ["empty"]),
    # lengths
    ("max_model_len", {**VLLM, f"{INFER_CFG}.max_model_len": 64}, f"{INFER_CFG}.max_model_len", "error",
     ["64 + 64 = 128", "at least 128"]),
    ("max_model_len_caps_responses", {**VLLM, f"{INFER_CFG}.max_model_len": 100}, f"{INFER_CFG}.max_model_len",
     "warning", ["64 + 64 = 128", "vLLM ends a response when prompt + response reach 100", "at most 36 response"]),
    ("sglang_context_length", {"actor_infer.strategy_args": {"strategy_name": "sglang",
                                                            "strategy_config": {"context_length": 64}}},
     f"{INFER_CFG}.context_length", "error", ["at least 128"]),
    ("max_new_tokens", {"actor_infer.generating_args.max_new_tokens": 100},
     "actor_infer.generating_args.max_new_tokens", "error", ["response_length 64"]),
    ("sequence_length", {"sequence_length": 100}, "sequence_length", "error", ["128"]),
    # exclusive options and required sections
    ("prompt_and_messages", {"actor_train.data_args.messages": "messages"}, "actor_train.data_args.messages",
     "error", ["prompt"]),
    ("file_and_synthetic", {"actor_train.data_args.synthetic": {"task": "copy"}}, "actor_train.data_args.synthetic",
     "error", ["file_name"]),
    ("no_training_data", {"actor_train.data_args": DELETE}, "actor_train.data_args", "error",
     ["file_name", "synthetic"]),
    ("kl_twice", {"use_kl_loss": True, "add_token_level_kl": True}, "use_kl_loss", "warning", ["twice"]),
    ("kl_needs_reference", {"use_kl_loss": True, "reference": DELETE}, "reference", "error", ["reference"]),
    ("gae_needs_critic", {"adv_estimator": "gae"}, "critic", "error", ["gae", "critic"]),
    ("adaptive_kl_needs_target", {"kl_ctrl_type": "adaptive"}, "target_kl", "error", ["target_kl"]),
    ("dynamic_bsz_budget", {"actor_train.use_dynamic_bsz": True}, "actor_train.max_token_len_per_gpu", "error",
     ["token budget"]),
    ("train_strategy_on_infer", {"actor_infer.strategy_args": {"strategy_name": "megatron_train"}},
     "actor_infer.strategy_args.strategy_name", "error", ["vllm, sglang, hf_infer"]),
    ("infer_strategy_on_train", {"actor_train.strategy_args": {"strategy_name": "vllm"}},
     "actor_train.strategy_args.strategy_name", "error", ["megatron_train", "torch_train"]),
    ("train_strategy_on_reference", {"reference.strategy_args": {"strategy_name": "deepspeed_train"}},
     "reference.strategy_args.strategy_name", "error", ["deepspeed_infer"]),
    ("resume_mode_path", {"resume_mode": "path"}, "resume_from_checkpoint", "error", ["path"]),
    ("resume_mode_conflict", {"resume_mode": "none", "resume_from_checkpoint": True}, "resume_mode", "error",
     ["contradicts"]),
    ("env_tags_defined", {"train_env_manager": {"tags": ["Sokoban", "Maze"]}, **SOKOBAN_ENV},
     "train_env_manager.tags", "error", ["Maze"]),
    ("env_n_groups", {"train_env_manager": {"tags": ["Sokoban"], "env_groups": 4, "n_groups": [3]}, **SOKOBAN_ENV},
     "train_env_manager.n_groups", "error", ["sums to 3"]),
    # rewards
    ("no_rewards", {"rewards": {}}, "rewards", "error", ["math_rule"]),
    ("reward_type_missing", {"rewards": {"m": {}}}, "rewards.m.reward_type", "error", ["math_rule"]),
    ("reward_cls_unknown", {"rewards": {"x": {"worker_cls": "os.system"}}}, "rewards.x.worker_cls", "error",
     ["never imported", "MathRuleRewardWorker"]),
    ("reward_cls_contradiction", {"rewards": {"m": {
        "worker_cls": "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker",
        "reward_type": "format"}}}, "rewards.m.reward_type", "error", ["contradicts"]),
    ("reward_model_needs_path", {"rewards": {"rm": {"reward_type": "reward_model"}}},
     "rewards.rm.model_args.model_name_or_path", "error", ["model path"]),
    # unknown keys at every level, with the closest name
    ("unknown_top", {"rollout_batch_sise": 4}, "rollout_batch_sise", "error", ["did you mean rollout_batch_size?"]),
    ("unknown_nested", {"actor_train.training_args.lerning_rate": 1e-6}, "actor_train.training_args.lerning_rate",
     "error", ["did you mean learning_rate?"]),
    ("unknown_strategy_config", {**VLLM, f"{INFER_CFG}.gpu_memory_utilisation": 0.5},
     f"{INFER_CFG}.gpu_memory_utilisation", "error", ["did you mean gpu_memory_utilization?"]),
    ("unknown_megatron", {**MEG, f"{MEG_CFG}.tensor_parallel_size": 2}, f"{MEG_CFG}.tensor_parallel_size",
     "error", ["did you mean tensor_model_parallel_size?"]),
    ("unknown_reward_key", {"rewards.math.tag_include": ["a"]}, "rewards.math.tag_include", "error",
     ["did you mean tag_included?"]),
    ("unknown_deep", {"actor_train.strategy_args": {"strategy_name": "deepspeed_train", "strategy_config": {
        "zero_optimization": {"stage": 2, "offload_optimizer": {"devise": "cpu"}}}}},
     "actor_train.strategy_args.strategy_config.zero_optimization.offload_optimizer.devise", "error",
     ["did you mean device?"]),
    # ROLL's dacite parsing drops a key its dataclass does not declare: a warning where it belongs (issue 43)
    ("key_in_wrong_section", {"actor_infer.temperature": 0.7}, "actor_infer.temperature", "warning",
     ["belongs in actor_infer.generating_args", "ROLL ignores it here"]),
    ("key_at_wrong_level", {"learning_rate": 1e-6}, "learning_rate", "warning", ["<worker>.training_args"]),
    ("unknown_strategy_name", {"actor_train.strategy_args": {"strategy_name": "megatron_trian"}},
     "actor_train.strategy_args.strategy_name", "error", ["did you mean megatron_train?", "fsdp2_train"]),
    ("missing_strategy_name", {"actor_train.strategy_args": {"strategy_config": {}}},
     "actor_train.strategy_args.strategy_name", "error", ["required"]),
    # types and enums
    ("wrong_type", {"actor_train.training_args.learning_rate": "fast"}, "actor_train.training_args.learning_rate",
     "error", ["number", "'fast'"]),
    ("wrong_section_type", {"actor_train.training_args": 5}, "actor_train.training_args", "error", ["section"]),
    ("enum_choices", {"adv_estimator": "ppo"}, "adv_estimator", "error", ["'gae'", "'grpo'", "'rloo'"]),
    ("enum_close", {"kl_penalty": "low_var"}, "kl_penalty", "error", ["did you mean low_var_kl?"]),
    ("enum_dtype", {"actor_train.model_args.dtype": "float16"}, "actor_train.model_args.dtype", "error",
     ["'fp32'", "'bf16'", "'fp16'"]),
    ("range", {"actor_infer.generating_args.top_p": 1.5}, "actor_infer.generating_args.top_p", "error", ["1"]),
    ("synthetic_task", {"actor_train.data_args": {"synthetic": {"task": "sort"}}},
     "actor_train.data_args.synthetic.task", "error", ["'reverse'", "'add'", "'copy'"]),
    ("malicious_device_mapping", {"actor_train.device_mapping": "__import__('os').system('touch /tmp/x')"},
     "actor_train.device_mapping", "error", ["not an allowed device expression", "list(range(0,16))"]),
    # suspicious settings
    ("greedy_group", {"actor_infer.generating_args.temperature": 0}, "actor_infer.generating_args.temperature",
     "warning", ["identical"]),
    ("grpo_group_of_one", {"num_return_sequences_in_group": 1, "actor_train.training_args.gradient_accumulation_steps": 1},
     "num_return_sequences_in_group", "warning", ["advantage is 0"]),
    ("save_after_end", {"save_steps": 1000}, "save_steps", "warning", ["max_steps 100"]),
    ("high_lr", {"actor_train.training_args.learning_rate": 0.01, "actor_train.model_args.model_name_or_path": "/models/qwen"},
     "actor_train.training_args.learning_rate", "warning", ["very high"]),
    ("critic_unused", {"critic": {}}, "critic", "warning", ["unused"]),
    ("validation_without_data", {"validation": {}}, "validation.data_args", "warning", ["skipped"]),
    ("val_samples_ignored", {"validation": {"data_args": {"file_name": "examples/data/t.jsonl"},
                                            "generating_args": {"num_return_sequences": 4}}},
     "validation.generating_args.num_return_sequences", "warning", ["val_n_sample"]),
    ("validation_strategy_ignored", {"validation": {"data_args": {"file_name": "examples/data/t.jsonl"},
                                                    "strategy_args": {"strategy_name": "hf_infer"}}},
     "validation.strategy_args", "warning", ["actor_infer's engine"]),
    ("deepspeed_infer_training_keys", {"reference.strategy_args": {"strategy_name": "deepspeed_infer",
                                       "strategy_config": {"gradient_clipping": 1.0, "zero_optimization": {
                                           "stage": 2, "offload_optimizer": {"device": "cpu"}}}}},
     "reference.strategy_args.strategy_config", "warning",
     ["forward-only", "gradient_clipping", "offload_optimizer", "stage 2"]),
    ("worker_cls_ignored", {"actor_train.worker_cls": "roll.pipeline.base_worker.ActorWorker"}, "actor_train.worker_cls",
     "warning", ["ignored"]),
]


def test_base_config_is_valid() -> None:
    result = validate_config(base())
    assert result.ok, result.issues
    assert result.warnings == []


@pytest.mark.parametrize(("changes", "path", "severity", "words"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rule(changes: dict[str, Any], path: str, severity: str, words: list[str]) -> None:
    result = validate_config(changed(changes))
    matching = [i for i in result.issues if i.path == path and i.severity == severity]
    assert matching, f"no {severity} at {path}; got {[str(i) for i in result.issues]}"
    message = " ".join(i.message for i in matching)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    if severity == "error":
        assert not result.ok and result.config is None
    else:
        assert result.rule_errors == []


@pytest.mark.parametrize(("micro", "accum", "hint"), [
    # 32 samples / 16 per pass = 2 passes per rank: 2 accumulations give the one step there is
    (16, 3, "; gradient_accumulation_steps = 2 works (1 optimizer step per rollout); "
            "override actor_train.training_args.gradient_accumulation_steps=2"),
    # 32 / 2 = 16 passes: 2 accumulations give 8 steps, 16 give one
    (2, 3, "; gradient_accumulation_steps = 2 works (8 optimizer steps per rollout), 16 gives one step per rollout; "
           "override actor_train.training_args.gradient_accumulation_steps=2"),
])
def test_batch_suggestion_reads_as_one_sentence(micro: int, accum: int, hint: str) -> None:
    result = validate_config(changed({"actor_train.training_args.per_device_train_batch_size": micro,
                                      "actor_train.training_args.gradient_accumulation_steps": accum}))
    (issue,) = [i for i in result.errors if i.path == "actor_train.training_args.gradient_accumulation_steps"]
    assert issue.message.endswith(hint), issue.message


def test_unbuilt_reward_worker_and_estimator_are_availability_errors() -> None:
    """A ROLL reward worker or advantage estimator this build lacks is refused like an unbuilt strategy: the
    config stays coherent (docs/decisions/0011), so the editor still shows it and says what is missing."""
    result = validate_config(changed({"rewards": {"code": {
        "worker_cls": "roll.pipeline.rlvr.rewards.general_val_rule_reward_worker.GeneralValRuleRewardWorker"}},
        "adv_estimator": "remax"}))
    assert result.config is not None and result.rule_errors == [], result.errors
    by_path = {i.path: i for i in result.errors}
    assert by_path["rewards.code.worker_cls"].kind == "not_built"
    assert "general rule reward" in by_path["rewards.code.worker_cls"].message
    assert by_path["adv_estimator"].kind == "not_built" and "grpo" in by_path["adv_estimator"].message


def test_all_errors_reported_at_once() -> None:
    result = validate_config(
        changed(
            {
                "actor_train.training_args.lerning_rate": 1e-6,
                "adv_estimator": "ppo",
                "actor_infer.generating_args.top_p": 2,
                "rewards.math.reward_type": "nope",
            }
        )
    )
    paths = {i.path for i in result.errors}
    assert {
        "actor_train.training_args.lerning_rate",
        "adv_estimator",
        "actor_infer.generating_args.top_p",
        "rewards.math.reward_type",
    } <= paths


def test_cross_field_errors_reported_together() -> None:
    result = validate_config(
        changed({**VLLM, "actor_train.training_args.gradient_accumulation_steps": 3, f"{INFER_CFG}.max_model_len": 10,
                 "actor_train.device_mapping": [0, 0]})
    )
    paths = {i.path for i in result.errors}
    assert {"actor_train.training_args.gradient_accumulation_steps", f"{INFER_CFG}.max_model_len",
            "actor_train.device_mapping"} <= paths


def test_load_config_raises_config_error_with_all_issues() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(changed({"adv_estimator": "ppo", "seed": "x"}))
    assert {i.path for i in info.value.issues} >= {"adv_estimator", "seed"}
    assert "adv_estimator" in str(info.value)


def test_issue_to_dict() -> None:
    issue = ConfigIssue("a.b", "bad", "warning")
    assert issue.to_dict() == {"field": "a.b", "message": "bad", "severity": "warning"}


def test_pg_clip_with_low_high_is_fine() -> None:
    assert validate_config(changed({"pg_clip": 0.2, "pg_clip_low": 0.1, "pg_clip_high": 0.3})).ok


def test_reward_norm_sets_norm_types() -> None:
    config = load_config(changed({"reward_norm": "group"}))
    assert (config.norm_mean_type, config.norm_std_type) == ("group", "group")
    config = load_config(changed({"reward_norm": "group", "norm_std_type": "batch"}))
    assert (config.norm_mean_type, config.norm_std_type) == ("group", "batch")
    # ROLL's docs example writes Python's None; ROLL main drops the key: nothing is normalised
    config = load_config(changed({"reward_norm": "None"}))
    assert (config.reward_norm, config.norm_mean_type, config.norm_std_type) == (None, None, None)


def test_roll_worker_cls_maps_to_reward_type() -> None:
    from trainer.roles.reward import reward_type

    cls = "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker"
    result = validate_config(changed({"rewards": {"math": {"worker_cls": cls}}}))
    assert result.ok, result.errors
    section = result.config.rewards["math"]
    assert section.reward_type is None and reward_type("math", section) == "math_rule"  # what the loop runs
    unknown = validate_config(changed({"rewards": {"math": {"worker_cls": "roll.pipeline.rlvr.rewards.Nope"}}}))
    assert any(i.path == "rewards.math.worker_cls" for i in unknown.errors), unknown.issues


def test_derived_values() -> None:
    result = validate_config(
        changed({**MEG, "actor_train.device_mapping": [0, 1, 2, 3], f"{MEG_CFG}.tensor_model_parallel_size": 2,
                 f"{MEG_CFG}.expert_model_parallel_size": 2, "ppo_epochs": 2,
                 **VLLM, "actor_infer.device_mapping": [0, 1, 2, 3], f"{INFER_CFG}.tensor_parallel_size": 2})
    )
    assert result.rule_errors == [], result.issues  # derived values are shown before backends exist
    d = result.derived
    assert d["rollout_samples_per_step"] == 32
    assert d["actor_train.world_size"] == 4
    assert d["actor_train.dp_size"] == 2  # TP divides out, EP does not
    assert d["actor_train.global_train_batch"] == 2 * 4 * 2
    assert d["actor_train.optimizer_steps_per_rollout"] == 32 // 16 * 2
    assert d["actor_infer.world_size"] == 2  # 4 devices / TP 2 per engine
    assert d["reference.world_size"] == 1


def test_deepspeed_dp_is_world_size() -> None:
    result = validate_config(changed({"actor_train.strategy_args": {"strategy_name": "deepspeed_train"},
                                      "actor_train.device_mapping": [0, 1],
                                      "actor_train.training_args.gradient_accumulation_steps": 2}))
    assert result.rule_errors == [], result.issues
    assert result.derived["actor_train.dp_size"] == 2


def test_pretrain_fills_model_paths_like_roll() -> None:
    config = load_config(
        changed({"pretrain": "/m/policy", "reward_pretrain": "/m/rm", "actor_train.model_args": {},
                 "adv_estimator": "gae", "critic": {}})
    )
    assert config.actor_train.model_args.model_name_or_path == "/m/policy"
    assert config.actor_infer.model_args.model_name_or_path == "/m/policy"
    assert config.reference.model_args.model_name_or_path == "/m/policy"
    assert config.critic.model_args.model_name_or_path == "/m/rm"


def test_roll_default_estimator_is_gae() -> None:
    result = validate_config(changed({"adv_estimator": DELETE}))
    assert [i.path for i in result.errors] == ["critic"]


def test_fsdp2_dp_divides_out_ulysses() -> None:
    result = validate_config(changed({"actor_train.device_mapping": [0, 1, 2, 3],
                                      "actor_train.strategy_args.strategy_config": {"ulysses_sequence_parallel_size": 2}}))
    assert result.rule_errors == [], result.issues
    assert result.derived["actor_train.dp_size"] == 2


def test_num_nodes_is_derived_like_roll() -> None:
    result = validate_config(changed({"actor_train.device_mapping": "list(range(0,16))", "rollout_batch_size": 32}))
    assert result.ok, result.issues
    assert result.derived["num_nodes"] == 2
    assert validate_config(changed({})).derived["num_nodes"] == 1


def test_huge_numbers_get_bounded_suggestions() -> None:
    result = validate_config(changed({"rollout_batch_size": 2**62,
                                      "actor_train.training_args.gradient_accumulation_steps": 3**20}))
    assert [i.path for i in result.errors] == ["actor_train.training_args.gradient_accumulation_steps"]
    assert "gradient_accumulation_steps = " in result.errors[0].message


def test_null_strategy_config_means_defaults() -> None:
    config = load_config(changed({"actor_train.strategy_args": {"strategy_name": "fsdp2_train",
                                                                "strategy_config": None}}))
    assert config.actor_train.strategy_args.strategy_config.fsdp_size == -1


@pytest.mark.parametrize(("role", "name", "available"), [
    ("actor_infer", "sglang", "hf_infer"),
])
def test_a_strategy_that_is_not_built_is_an_error_listing_what_is(role: str, name: str, available: str) -> None:
    result = validate_config(changed({f"{role}.strategy_args": {"strategy_name": name}}))
    assert [(i.path, i.severity) for i in result.errors] == [(f"{role}.strategy_args.strategy_name", "error")]
    assert f"{name} is not built" in result.errors[0].message and available in result.errors[0].message
    assert not result.ok and result.derived  # the config is coherent: its arithmetic is still shown


def test_global_template_fills_roles_that_leave_template_unset() -> None:
    config = load_config(changed({"global_template": "qwen2_5",
                                  "validation": {"data_args": {"file_name": "examples/data/t.jsonl", "template": "none"}}}))
    assert config.actor_train.data_args.template == "qwen2_5"  # unset in the base config
    assert config.validation.data_args.template == "none"  # set: kept


def test_ulysses_sequence_parallelism_is_refused_until_built() -> None:
    result = validate_config(changed({"actor_train.device_mapping": [0, 1],
                                      "actor_train.strategy_args.strategy_config": {"ulysses_sequence_parallel_size": 2}}))
    path = "actor_train.strategy_args.strategy_config.ulysses_sequence_parallel_size"
    assert [(i.path, i.kind) for i in result.errors] == [(path, "not_built")]
    assert "valid: 1" in result.errors[0].message
    assert not [w for w in result.warnings if w.path == path]  # one message per field


@pytest.mark.parametrize("where", ["actor_train.data_args.template", "global_template"])
def test_a_template_the_prompt_builder_does_not_know_is_refused_before_launch(where: str) -> None:
    """A ROLL vision-language file (`template: qwen2-vl`) validated and then failed when the prompts were
    rendered; an unknown template is now the config's error, naming the valid ones."""
    from trainer.config.schema import PipelineConfig

    raw: dict = {"global_template": "qwen2-vl"} if where == "global_template" else {
        "actor_train": {"data_args": {"template": "qwen2-vl"}}}
    with pytest.raises(ValueError, match=r"unknown template 'qwen2-vl' \(vision-language templates are not built"):
        PipelineConfig.model_validate(raw)
    assert PipelineConfig.model_validate({"global_template": "qwen2_5"}).global_template == "qwen2_5"
