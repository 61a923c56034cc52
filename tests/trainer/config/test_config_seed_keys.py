"""Every key documented in the ROLL guides (seeds 000 and 002) loads, round-trips through YAML and
appears in the JSON Schema with a description and a category."""

from __future__ import annotations

from typing import Any

import pytest
from config_testing import DELETE, changed, coherent_config, get_attr_path, schema_property

from trainer.config import config_to_yaml

MEGATRON = "actor_train.strategy_args.strategy_config"
VLLM = "actor_infer.strategy_args.strategy_config"
VLLM_ON = {"actor_infer.strategy_args": {"strategy_name": "vllm", "strategy_config": {"max_model_len": 256}}}
SGLANG = {"actor_infer.strategy_args": {"strategy_name": "sglang", "strategy_config": {"context_length": 256}}}

# documented key -> extra changes needed so that the key can take a non-default value
_MEGATRON_BASE = {"actor_train.strategy_args.strategy_name": "megatron_train", "actor_train.device_mapping": [0, 1]}
# an agentic run needs an environment to play
_SOKOBAN = {"train_env_manager.tags": ["SimpleSokoban"], "custom_envs": {"SimpleSokoban": {"env_type": "sokoban"}}}

DOCUMENTED: dict[str, tuple[Any, dict[str, Any]]] = {
    # pipeline (seed 002 "Pipeline配置" and 000 "Pipeline Config")
    "exp_name": ("agentic_pipeline", {}),
    "seed": (7, {}),
    "rpc_timeout": (600, {}),
    "logging_dir": ("./out/logs", {}),
    "output_dir": ("./out", {}),
    "render_save_dir": ("./out/render", {}),
    "system_envs": ({"USE_MODELSCOPE": "1"}, {}),
    "track_with": ("wandb", {}),
    "tracker_kwargs": ({"log_dir": "./tb", "project": "p"}, {}),
    "num_nodes": (2, {}),
    "num_gpus_per_node": (4, {}),
    "local_rank": (0, {}),
    "max_steps": (1024, {}),
    "save_steps": (20, {}),
    "logging_steps": (5, {}),
    "eval_steps": (20, {}),
    "resume_from_checkpoint": (True, {}),
    "checkpoint_config": ({"type": "file_system", "output_dir": "./ckpt"}, {}),
    "rollout_batch_size": (16, {}),
    "val_batch_size": (32, {}),
    "prompt_length": (32, {}),
    "response_length": (128, {"actor_infer.generating_args.max_new_tokens": 128}),
    "sequence_length": (200, {}),
    "generate_opt_level": (0, {}),
    "is_num_return_sequences_expand": (True, {}),
    "max_running_requests": (64, {}),
    "is_use_additional_prompts": (True, {}),
    "max_additional_running_prompts": (8, {}),
    "num_return_sequences_in_group": (8, {}),
    # PPO core
    "ppo_epochs": (2, {}),
    "max_grad_norm": (0.5, {}),
    "l2": (0.01, {}),
    "lambd": (0.9, {}),
    "gamma": (0.99, {}),
    "kl_penalty": ("full", {}),
    "init_kl_coef": (0.05, {}),
    "kl_horizon": (500, {}),
    # reward / advantage processing
    "use_reward_scaling": (True, {}),
    "add_len_reward": (True, {}),
    "reward_clip": (5.0, {}),
    "difficulty_loss_weight": (True, {}),
    "length_loss_weight": (True, {}),
    "use_reward_norm": (True, {}),
    "whiten_rewards": (True, {}),
    "whiten_advantages": (True, {}),
    "advantage_clip": (2.0, {}),
    "adv_estimator": ("reinforce", {}),
    "reward_norm": ("group", {}),
    "reward_shift": (True, {}),
    "reward_scale": (True, {}),
    # loss components
    "add_token_level_kl": (True, {}),
    "critic_warmup": (3, {}),
    "use_kl_loss": (True, {}),
    "kl_loss_coef": (0.01, {}),
    "entropy_loss_coef": (0.001, {}),
    "sft_loss_coef": (0.1, {}),
    "use_topr_loss": (True, {}),
    "rl_loss_coef": (0.5, {}),
    "dual_clip_loss": (True, {}),
    "loss_agg_mode": ("seq-mean-token-sum-norm", {}),
    # agentic: reward normalisation and env manager
    "reward_normalization.grouping": ("batch", {}),
    "reward_normalization.method": ("mean_std", {}),
    "train_env_manager.env_groups": (4, {"train_env_manager.tags": ["SimpleSokoban"],
                                         "custom_envs": {"SimpleSokoban": {"env_type": "sokoban"}}}),
    "train_env_manager.group_size": (8, _SOKOBAN),
    "train_env_manager.tags": (["SimpleSokoban"], {"custom_envs": {"SimpleSokoban": {"env_type": "sokoban"}}}),
    "train_env_manager.n_groups": ([2], {"train_env_manager.tags": ["SimpleSokoban"], "train_env_manager.env_groups": 2,
                                        "custom_envs": {"SimpleSokoban": {"env_type": "sokoban"}}}),
    "train_env_manager.max_traj_per_env": (4, {**_SOKOBAN, "train_env_manager.env_groups": 2}),
    "train_env_manager.format_penalty": (-0.1, _SOKOBAN),
    "train_env_manager.worker_cls": ("roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager", _SOKOBAN),
    "val_env_manager.env_groups": (2, {**_SOKOBAN, "val_env_manager.tags": ["SimpleSokoban"]}),
    # worker config (seed 002 "Worker配置")
    "actor_train.world_size": (2, {"actor_train.device_mapping": [0, 1]}),
    "actor_train.device_mapping": ([0, 1, 2, 3], {}),
    "actor_infer.num_gpus_per_worker": (2, {"actor_infer.strategy_args": {"strategy_name": "hf_infer"},
                                            "actor_infer.device_mapping": [0, 1]}),
    "actor_infer.model_update_frequency": (2, {}),
    "actor_train.infer_batch_size": (4, {}),
    "actor_train.model_args.dtype": ("bf16", {}),
    "actor_train.model_args.disable_gradient_checkpointing": (True, {}),
    "actor_train.data_args.template": ("qwen2_5", {}),
    "actor_train.data_args.file_name": (["a.jsonl", "b.json"], {}),
    "actor_train.data_args.prompt": ("instruction", {}),
    "actor_train.data_args.messages": ("messages", {"actor_train.data_args.prompt": DELETE}),
    "actor_infer.generating_args.max_new_tokens": (32, {}),
    "actor_infer.generating_args.temperature": (0.99, {}),
    "actor_train.strategy_args.strategy_name": ("deepspeed_train", {}),
    "actor_train.training_args.learning_rate": (1e-5, {}),
    "actor_train.training_args.weight_decay": (0.01, {}),
    "actor_train.training_args.per_device_train_batch_size": (1, {}),
    "actor_train.training_args.gradient_accumulation_steps": (8, {}),
    "actor_train.training_args.warmup_steps": (20, {}),
    # Megatron strategy config
    f"{MEGATRON}.tensor_model_parallel_size": (2, _MEGATRON_BASE),
    f"{MEGATRON}.pipeline_model_parallel_size": (2, _MEGATRON_BASE),
    f"{MEGATRON}.expert_model_parallel_size": (2, _MEGATRON_BASE),
    f"{MEGATRON}.context_parallel_size": (2, _MEGATRON_BASE),
    f"{MEGATRON}.virtual_pipeline_model_parallel_size": (2, {**_MEGATRON_BASE,
                                                              f"{MEGATRON}.pipeline_model_parallel_size": 2}),
    f"{MEGATRON}.sequence_parallel": (True, {**_MEGATRON_BASE, f"{MEGATRON}.tensor_model_parallel_size": 2}),
    f"{MEGATRON}.recompute_granularity": ("selective", _MEGATRON_BASE),
    f"{MEGATRON}.moe_layer_recompute": (True, _MEGATRON_BASE),
    f"{MEGATRON}.moe_token_dispatcher_type": ("alltoall", _MEGATRON_BASE),
    f"{MEGATRON}.moe_grouped_gemm": (True, _MEGATRON_BASE),
    f"{MEGATRON}.moe_shared_expert_overlap": (True, _MEGATRON_BASE),
    f"{MEGATRON}.overlap_grad_reduce": (True, _MEGATRON_BASE),
    # vLLM strategy config
    f"{VLLM}.gpu_memory_utilization": (0.6, VLLM_ON),
    f"{VLLM}.block_size": (32, VLLM_ON),
    f"{VLLM}.max_model_len": (8000, VLLM_ON),
    f"{VLLM}.load_format": ("dummy", VLLM_ON),
    # SGLang strategy config
    f"{VLLM}.mem_fraction_static": (0.7, SGLANG),
    f"{VLLM}.load_format#sglang": ("dummy", SGLANG),
}


@pytest.mark.parametrize("key", list(DOCUMENTED))
def test_documented_key_loads_round_trips_and_has_schema(key: str) -> None:
    value, extra = DOCUMENTED[key]
    path = key.split("#")[0]
    changes = dict(extra)
    changes[path] = value
    config = coherent_config(changed(changes))
    got = get_attr_path(config, path)
    if hasattr(got, "model_dump"):
        got = got.model_dump()
        value = {**got, **value}
    assert got == value

    assert coherent_config(config_to_yaml(config)) == config

    prop = schema_property(path)
    assert prop.get("description"), f"{path} has no description"
    assert prop.get("category"), f"{path} has no category"


def test_deepspeed_preset_reference_resolves_without_files() -> None:
    """Seed 000: `strategy_config: ${deepspeed_zero2}` (and the other presets) after a defaults list."""
    for preset, stage in [("deepspeed_zero", 0), ("deepspeed_zero2", 2), ("deepspeed_zero3", 3),
                          ("deepspeed_zero3_cpuoffload", 3)]:
        text = f"""
defaults:
  - ../config/deepspeed_zero@_here_
  - ../config/{preset}@_here_
actor_train:
  strategy_args:
    strategy_name: deepspeed_train
    strategy_config: ${{{preset}}}
"""
        data = changed({})
        import yaml

        merged = yaml.safe_load(text)
        data["defaults"] = merged["defaults"]
        data["actor_train"]["strategy_args"] = merged["actor_train"]["strategy_args"]
        config = coherent_config(data)
        zero = config.actor_train.strategy_args.strategy_config.zero_optimization
        assert zero.stage == stage
        if preset.endswith("cpuoffload"):
            assert zero.offload_optimizer.device == "cpu"
        assert coherent_config(config_to_yaml(config)) == config


def test_every_schema_property_has_description_and_category() -> None:
    from trainer.config import config_json_schema

    schema = config_json_schema()
    models = {"PipelineConfig": schema, **schema["$defs"]}
    missing = [
        f"{model}.{name}"
        for model, definition in models.items()
        for name, prop in definition.get("properties", {}).items()
        if not prop.get("description") or not prop.get("category")
    ]
    assert missing == []
    assert len(models) > 20


def test_literal_dollar_text_round_trips() -> None:
    config = coherent_config(changed({"system_envs": {"A": "literal \\${HOME} text"}}))
    assert config.system_envs == {"A": "literal ${HOME} text"}
    assert coherent_config(config_to_yaml(config)) == config
    assert coherent_config(config) == config  # a PipelineConfig is a valid source too
