"""verl's config surface per release family, as data (keys and defaults of ppo_trainer.yaml and
ppo_megatron_trainer.yaml; from v0.5 on, the trees Hydra composes from verl/trainer/config/*/).

Families: v0.3 (v0.3.0.post1 – v0.3.1), v0.4 (v0.4.0 – v0.4.1), v0.5 (v0.5.x – v0.6.x: Hydra config
groups, `_target_` meta keys, the profiler rework; v0.5's actor.tis_imp_ratio_cap and v0.6's flat
algorithm.rollout_is* keys) and main (late 2025 onward: rollout correction, transfer queue, `model_engine`, the
new reward and distillation sections). Each family is the previous one plus what that release added or changed,
minus what it removed.
"""

from __future__ import annotations

from typing import Any

from trainer.config.importers.surface import BuiltinConfig, Family, Flat, Surface, evolve, under

ARR = "actor_rollout_ref"
A, REF, RO, M = f"{ARR}.actor", f"{ARR}.ref", f"{ARR}.rollout", f"{ARR}.model"
CKPT = ["model", "optimizer", "extra"]
MINI = f"${{{A}.ppo_mini_batch_size}}"


def _fsdp_engine(offload_all: bool) -> dict[str, Any]:
    keys: dict[str, Any] = {"wrap_policy.min_num_params": 0, "param_offload": False, "reshard_after_forward": True,
                            "fsdp_size": -1}
    if offload_all:
        keys |= {"optimizer_offload": False, "offload_policy": False}
    return keys


def _megatron_engine(train: bool, seed: Any = 1) -> dict[str, Any]:
    keys: dict[str, Any] = {
        "param_offload": False, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None, "context_parallel_size": 1, "sequence_parallel": True,
        "use_distributed_optimizer": train, "use_dist_checkpointing": False, "dist_checkpointing_path": None,
        "seed": seed,
    }
    if train:
        keys |= {"grad_offload": False, "optimizer_offload": False}
    return keys


def _profile() -> dict[str, Any]:
    return {"use_profile": False, "profile_ranks": None, "step_start": -1, "step_end": -1, "save_path": None}


# ---------------------------------------------------------------------------------------------
# v0.3 (v0.3.0.post1 – v0.3.1, spring 2025)

_DATA_03: Flat = under("data", {
    "tokenizer": None, "train_files": "~/data/rlhf/gsm8k/train.parquet", "val_files": "~/data/rlhf/gsm8k/test.parquet",
    "prompt_key": "prompt", "reward_fn_key": "data_source", "max_prompt_length": 512, "max_response_length": 512,
    "train_batch_size": 1024, "val_batch_size": None, "return_raw_input_ids": False, "return_raw_chat": False,
    "shuffle": True, "filter_overlong_prompts": False, "filter_overlong_prompts_workers": 1, "truncation": "error",
    "image_key": "images", "video_key": "videos", "custom_cls.path": None, "custom_cls.name": None,
})
_ROLLOUT_03: Flat = under(RO, {
    "name": "vllm", "mode": "sync", "chat_scheduler": None, "temperature": 1.0, "top_k": -1, "top_p": 1,
    "use_fire_sampling": False, "prompt_length": "${data.max_prompt_length}",
    "response_length": "${data.max_response_length}", "dtype": "bfloat16", "gpu_memory_utilization": 0.5,
    "ignore_eos": False, "enforce_eager": True, "free_cache_engine": True, "load_format": "dummy_dtensor",
    "tensor_model_parallel_size": 2, "max_num_batched_tokens": 8192, "max_model_len": None, "max_num_seqs": 1024,
    "log_prob_micro_batch_size": None, "log_prob_micro_batch_size_per_gpu": None,
    "log_prob_use_dynamic_bsz": f"${{{A}.use_dynamic_bsz}}",
    "log_prob_max_token_len_per_gpu": f"${{{A}.ppo_max_token_len_per_gpu}}", "disable_log_stats": True,
    "enable_chunked_prefill": True, "do_sample": True, "n": 1, "engine_kwargs.swap_space": None,
    "val_kwargs.top_k": -1, "val_kwargs.top_p": 1.0, "val_kwargs.temperature": 0, "val_kwargs.n": 1,
    "val_kwargs.do_sample": False, "multi_turn.enable": False, "multi_turn.max_turns": None,
    "multi_turn.tool_config_path": None, "multi_turn.format": "chatml",
})
_ACTOR_03: Flat = under(A, {
    "ppo_mini_batch_size": 256, "ppo_micro_batch_size": None, "ppo_micro_batch_size_per_gpu": None,
    "use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 16384, "clip_ratio": 0.2, "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2, "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean", "entropy_coeff": 0,
    "use_kl_loss": False, "use_torch_compile": True, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl",
    "ppo_epochs": 1, "shuffle": False, "checkpoint.contents": CKPT, "optim.lr": 1e-6, "optim.lr_warmup_steps": -1,
    "optim.lr_warmup_steps_ratio": 0.0, "optim.min_lr_ratio": None, "optim.warmup_style": "constant",
    "optim.total_training_steps": -1, "optim.weight_decay": 0.01,
})
_CRITIC_03: Flat = under("critic", {
    "rollout_n": f"${{{RO}.n}}", "optim.lr": 1e-5, "optim.lr_warmup_steps_ratio": 0.0, "optim.min_lr_ratio": None,
    "optim.warmup_style": "constant", "optim.total_training_steps": -1, "optim.weight_decay": 0.01,
    "model.path": "~/models/deepseek-llm-7b-chat", "model.tokenizer_path": f"${{{M}.path}}",
    "model.override_config": {}, "model.external_lib": f"${{{M}.external_lib}}", "ppo_mini_batch_size": MINI,
    "ppo_micro_batch_size": None, "ppo_micro_batch_size_per_gpu": None, "use_dynamic_bsz": f"${{{A}.use_dynamic_bsz}}",
    "ppo_epochs": f"${{{A}.ppo_epochs}}", "shuffle": f"${{{A}.shuffle}}", "cliprange_value": 0.5,
    "checkpoint.contents": CKPT,
})
_REWARD_03: Flat = under("reward_model", {
    "enable": False, "model.input_tokenizer": f"${{{M}.path}}", "model.path": "~/models/FsfairX-LLaMA3-RM-v0.1",
    "model.external_lib": f"${{{M}.external_lib}}", "micro_batch_size": None, "micro_batch_size_per_gpu": None,
    "max_length": None, "use_dynamic_bsz": "${critic.use_dynamic_bsz}", "launch_reward_fn_async": False,
})
_COMMON_03: Flat = {
    **_DATA_03, **_ROLLOUT_03, **_ACTOR_03, **_CRITIC_03, **_REWARD_03,
    f"{ARR}.hybrid_engine": True, f"{M}.path": "~/models/deepseek-llm-7b-chat", f"{M}.external_lib": None,
    f"{M}.override_config": {}, f"{REF}.use_torch_compile": f"${{{A}.use_torch_compile}}",
    f"{REF}.log_prob_micro_batch_size": None, f"{REF}.log_prob_micro_batch_size_per_gpu": None,
    "custom_reward_function.path": None, "custom_reward_function.name": "compute_score",
    **under("algorithm", {"gamma": 1.0, "lam": 1.0, "adv_estimator": "gae", "norm_adv_by_std_in_grpo": True,
                          "use_kl_in_reward": False, "kl_penalty": "kl", "kl_ctrl.type": "fixed",
                          "kl_ctrl.kl_coef": 0.001, "kl_ctrl.horizon": 10000, "kl_ctrl.target_kl": 0.1}),
    **under("trainer", {
        "balance_batch": True, "total_epochs": 30, "total_training_steps": None, "project_name": "verl_examples",
        "experiment_name": "gsm8k", "logger": ["console", "wandb"], "val_generations_to_log_to_wandb": 0,
        "log_val_generations": 0, "nnodes": 1, "n_gpus_per_node": 8, "save_freq": -1, "resume_mode": "auto",
        "resume_from_path": None, "val_before_train": True, "test_freq": -1, "critic_warmup": 0,
        "default_hdfs_dir": None, "del_local_ckpt_after_load": False, "remove_previous_ckpt_in_save": False,
        "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
        "max_actor_ckpt_to_keep": None, "max_critic_ckpt_to_keep": None, "ray_wait_register_center_timeout": 300,
    }),
    "ray_init.num_cpus": None,
}
_FSDP_03: Flat = {
    **_COMMON_03,
    f"{M}.enable_gradient_checkpointing": True, f"{M}.use_remove_padding": False, f"{M}.use_liger": False,
    f"{M}.return_last_hidden_state": False, f"{M}.use_fused_loss": False,
    f"{A}.strategy": "fsdp", f"{A}.grad_clip": 1.0, f"{A}.ulysses_sequence_parallel_size": 1,
    **under(f"{A}.fsdp_config", _fsdp_engine(offload_all=True)),
    f"{REF}.strategy": "fsdp", **under(f"{REF}.fsdp_config", {**_fsdp_engine(offload_all=False)}),
    f"{REF}.log_prob_use_dynamic_bsz": f"${{{A}.use_dynamic_bsz}}",
    f"{REF}.log_prob_max_token_len_per_gpu": f"${{{A}.ppo_max_token_len_per_gpu}}",
    f"{REF}.ulysses_sequence_parallel_size": f"${{{A}.ulysses_sequence_parallel_size}}",
    "critic.strategy": "fsdp", "critic.model.enable_gradient_checkpointing": True,
    "critic.model.use_remove_padding": False, **under("critic.model.fsdp_config", _fsdp_engine(offload_all=True)),
    "critic.forward_micro_batch_size": "${critic.ppo_micro_batch_size}",
    "critic.forward_micro_batch_size_per_gpu": "${critic.ppo_micro_batch_size_per_gpu}",
    "critic.ppo_max_token_len_per_gpu": 32768, "critic.forward_max_token_len_per_gpu": "${critic.ppo_max_token_len_per_gpu}",
    "critic.ulysses_sequence_parallel_size": 1, "critic.grad_clip": 1.0,
    "reward_model.strategy": "fsdp", "reward_model.model.use_remove_padding": False,
    **under("reward_model.model.fsdp_config", _fsdp_engine(offload_all=False)),
    "reward_model.ulysses_sequence_parallel_size": 1,
    "reward_model.forward_max_token_len_per_gpu": "${critic.forward_max_token_len_per_gpu}",
    "reward_model.reward_manager": "naive",
}
_MEGATRON_03: Flat = {
    **_COMMON_03,
    f"{M}.enable_gradient_checkpointing": False,
    **under(f"{M}.gradient_checkpointing_kwargs", {"activations_checkpoint_method": None,
                                                   "activations_checkpoint_granularity": None,
                                                   "activations_checkpoint_num_layers": None}),
    f"{A}.strategy": "megatron", f"{A}.data_loader_seed": None, f"{A}.optim.clip_grad": 1.0,
    **under(f"{A}.megatron", _megatron_engine(train=True)), **under(f"{A}.profile", _profile()),
    f"{A}.load_weight": True,
    f"{REF}.strategy": "megatron", **under(f"{REF}.megatron", _megatron_engine(train=False)),
    **under(f"{REF}.profile", _profile()), f"{REF}.load_weight": True,
    f"{RO}.load_format": "dummy_megatron", f"{RO}.tensor_model_parallel_size": 1, f"{RO}.enable_chunked_prefill": False,
    f"{RO}.layer_name_map.qkv_layer_name": "qkv", f"{RO}.layer_name_map.gate_proj_layer_name": "gate_up",
    "critic.strategy": "megatron", "critic.optim.clip_grad": 1.0, "critic.model.enable_gradient_checkpointing": False,
    **under("critic.model.gradient_checkpointing_kwargs", {"activations_checkpoint_method": None,
                                                           "activations_checkpoint_granularity": None,
                                                           "activations_checkpoint_num_layers": None}),
    **under("critic.megatron", _megatron_engine(train=True)), "critic.load_weight": True,
    "critic.data_loader_seed": f"${{{A}.data_loader_seed}}", "critic.kl_ctrl.type": "fixed",
    "critic.kl_ctrl.kl_coef": 0.001,
    "reward_model.strategy": "megatron", **under("reward_model.megatron", _megatron_engine(train=False)),
    "reward_model.load_weight": True, "trainer.max_ref_ckpt_to_keep": None,
}

# ---------------------------------------------------------------------------------------------
# v0.4 (v0.4.0 – v0.4.1, summer 2025): shared-memory loading, LoRA, policy-loss modes, the profiler,
# multi-turn tools, checkpoint save/load contents, per-engine kwargs

_PROFILER_04 = {"discrete": False, "all_ranks": False, "ranks": None}
_NSIGHT = {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}
_ADD_04: Flat = {
    **under("data", {"use_shm": False, "return_full_prompt": False, "dataloader_num_workers": 8,
                     "validation_shuffle": False, "trust_remote_code": False}),
    **under(M, {"custom_chat_template": None, "use_shm": False, "enable_activation_offload": False, "lora_rank": 0,
                "lora_alpha": 16, "target_modules": "all-linear", "use_fused_kernels": False,
                "fused_kernel_options.impl_backend": "torch", "trust_remote_code": False}),
    **under(A, {"policy_loss.loss_mode": "vanilla", "policy_loss.clip_cov_ratio": 0.0002,
                "policy_loss.clip_cov_lb": 1.0, "policy_loss.clip_cov_ub": 5.0, "policy_loss.kl_cov_ratio": 0.0002,
                "policy_loss.ppo_kl_coef": 0.1, "checkpoint.save_contents": CKPT,
                "checkpoint.load_contents": f"${{{A}.checkpoint.save_contents}}", "optim.num_cycles": 0.5,
                "optim.min_lr_ratio": 0.0, **under("profiler", _PROFILER_04)}),
    **under(REF, under("profiler", _PROFILER_04)),
    **under(RO, {"engine_kwargs.vllm.swap_space": None, "engine_kwargs.vllm.disable_mm_preprocessor_cache": False,
                 "engine_kwargs.sglang.attention_backend": None, "multi_turn.max_assistant_turns": None,
                 "multi_turn.max_user_turns": None, "multi_turn.max_parallel_calls": 1,
                 "multi_turn.max_tool_response_length": 256, "multi_turn.tool_response_truncate_side": "middle",
                 "multi_turn.interaction_config_path": None, "multi_turn.completion_callback": None,
                 "multi_turn.use_inference_chat_template": False,
                 "multi_turn.tokenization_sanity_check_mode": "strict", "multi_turn.format": "hermes",
                 "calculate_log_probs": False, "agent.num_workers": 8, "update_weights_bucket_megabytes": 512,
                 "layered_summon": False, **under("profiler", _PROFILER_04)}),
    **under("critic", {"checkpoint.save_contents": CKPT, "checkpoint.load_contents": "${critic.checkpoint.save_contents}",
                       "loss_agg_mode": f"${{{A}.loss_agg_mode}}", "model.trust_remote_code": f"${{{M}.trust_remote_code}}",
                       "model.lora_rank": 0, "model.lora_alpha": 16, "model.target_modules": "all-linear",
                       "model.use_shm": False, **under("profiler", _PROFILER_04)}),
    **under("reward_model", {"model.trust_remote_code": False, "model.use_shm": False,
                             "model.use_fused_kernels": f"${{{M}.use_fused_kernels}}", "sandbox_fusion.url": None,
                             "sandbox_fusion.max_concurrent": 64, "sandbox_fusion.memory_limit_mb": 1024,
                             **under("profiler", _PROFILER_04)}),
    **under("algorithm", {"use_pf_ppo": False, "pf_ppo.reweight_method": "pow", "pf_ppo.weight_pow": 2.0}),
    **under("trainer", {"device": "cuda", "esi_redundant_time": 0, "profile_steps": None,
                        **under("controller_nsight_options", _NSIGHT),
                        **under("worker_nsight_options", {**_NSIGHT, "capture-range": "cudaProfilerApi",
                                                          "capture-range-end": None, "kill": "none"}),
                        "rollout_data_dir": None, "validation_data_dir": None}),
    "ray_init.timeline_json_file": None,
}
_DROP_04 = ["trainer.val_generations_to_log_to_wandb", "trainer.remove_previous_ckpt_in_save",
            f"{M}.return_last_hidden_state", f"{M}.use_fused_loss", f"{RO}.engine_kwargs.swap_space",
            f"{A}.profile.", f"{REF}.profile."]
_FSDP_ADD_04: Flat = {
    f"{A}.entropy_from_logits_with_chunking": False, f"{A}.entropy_checkpointing": False,
    f"{A}.fsdp_config.forward_prefetch": False, f"{REF}.fsdp_config.forward_prefetch": False,
    f"{REF}.entropy_from_logits_with_chunking": False, f"{REF}.entropy_checkpointing": False,
    "critic.model.enable_activation_offload": False, "critic.model.fsdp_config.forward_prefetch": False,
    "reward_model.model.fsdp_config.forward_prefetch": False, "reward_model.model.fused_kernel_options.impl_backend":
    f"${{{M}.fused_kernel_options.impl_backend}}",
}
_MEGATRON_ADD_04: Flat = {
    f"{A}.megatron.expert_model_parallel_size": 1, f"{A}.megatron.expert_tensor_parallel_size": None,
    f"{A}.megatron.override_transformer_config": {}, f"{A}.megatron.use_mbridge": False,
    f"{REF}.megatron.expert_model_parallel_size": 1, f"{REF}.megatron.expert_tensor_parallel_size": None,
    f"{REF}.megatron.override_transformer_config": f"${{{A}.megatron.override_transformer_config}}",
    "critic.megatron.expert_model_parallel_size": 1, "critic.megatron.expert_tensor_parallel_size": None,
    "critic.megatron.override_transformer_config": {}, f"{A}.optim.lr_warmup_init": 0.0,
    f"{A}.optim.lr_decay_steps": None, f"{A}.optim.lr_decay_style": "constant", f"{A}.optim.min_lr": 0.0,
    f"{A}.optim.weight_decay_incr_style": "constant", f"{A}.optim.lr_wsd_decay_style": "exponential",
    f"{A}.optim.lr_wsd_decay_steps": None, f"{A}.optim.use_checkpoint_opt_param_scheduler": False,
    f"{RO}.enable_chunked_prefill": False,
}

# ---------------------------------------------------------------------------------------------
# v0.5 (v0.5.x – v0.6.x, autumn 2025): Hydra config groups with `_target_` meta keys, the global
# profiler, ray_kwargs, nccl_timeout, critic.enable, data samplers and generators, agent loops

_TOOL_CONFIG = {"nsys.discrete": "${global_profiler.global_tool_config.nsys.discrete}",
                "npu.contents": [], "npu.level": "level1", "npu.analysis": True, "npu.discrete": False,
                "torch.step_start": 0, "torch.step_end": None,
                "torch_memory.trace_alloc_max_entries": 100000, "torch_memory.stack_depth": 32}
_PROFILER_05 = {"tool": None, "enable": False, "all_ranks": False, "ranks": [], "save_path": None,
                **under("tool_config", _TOOL_CONFIG)}
_ADD_05: Flat = {
    **under("data", {"return_multi_modal_inputs": True, "sampler.class_path": None, "sampler.class_name": None,
                     "datagen.path": None, "datagen.name": None, "apply_chat_template_kwargs": {}}),
    f"{ARR}.nccl_timeout": 600, f"{M}.exclude_modules": None,
    **under(A, {"use_fused_kernels": False, "use_remove_padding": False, "checkpoint.async_save": False,
                **under("profiler", _PROFILER_05)}),
    **under(REF, {"model": None, **under("profiler", _PROFILER_05)}),
    **under(RO, {"name": "???", "mode": "async", "enforce_eager": False, "cudagraph_capture_sizes": None,
                 "over_sample_rate": 0, "multi_stage_wake_up": False, "engine_kwargs.vllm": {},
                 "engine_kwargs.sglang": {}, "agent.agent_loop_config_path": None,
                 "agent.custom_async_server.path": None, "agent.custom_async_server.name": None,
                 "trace.backend": None, "trace.token2text": False, "skip_rollout": False,
                 "skip_dump_dir": "/tmp/rollout_dump", **under("profiler", _PROFILER_05)}),
    **under("critic", {"enable": None, "checkpoint.async_save": False, "optim.min_lr_ratio": None,
                       "optim.lr_warmup_steps": -1, **under("profiler", _PROFILER_05)}),
    **under("reward_model", under("profiler", _PROFILER_05)),
    **under("global_profiler", {"tool": None, "steps": None, "profile_continuous_steps": False,
                                "save_path": "outputs/profile",
                                **under("global_tool_config.nsys", {"discrete": False,
                                                                   **under("controller_nsight_options", _NSIGHT),
                                                                   **under("worker_nsight_options", {
                                                                       **_NSIGHT, "capture-range": "cudaProfilerApi",
                                                                       "capture-range-end": None, "kill": "none"})}),
                                **under("global_tool_config.torch_memory", {
                                    "trace_alloc_max_entries": 100000, "stack_depth": 32, "context": "all",
                                    "stacks": "all", "kw_args": {}})}),
    "ray_kwargs.ray_init.num_cpus": None, "ray_kwargs.timeline_json_file": None,
    **under("trainer", {"val_only": False, "use_legacy_worker_impl": "auto"}),
    # v0.5.x's truncated importance sampling, replaced in v0.6 by the flat rollout_is* keys (main: rollout_correction)
    f"{A}.tis_imp_ratio_cap": -1,
    **under("algorithm", {"rollout_is": False, "rollout_is_threshold": None, "rollout_is_threshold_lower": None,
                          "rollout_is_level": "token", "rollout_is_mode": "truncate",
                          "rollout_is_veto_threshold": None}),
}
_DROP_05 = [f"{A}.profiler.discrete", f"{REF}.profiler.discrete", f"{RO}.profiler.discrete",
            "critic.profiler.discrete", "reward_model.profiler.discrete", "trainer.profile_steps",
            "trainer.controller_nsight_options.", "trainer.worker_nsight_options.", "ray_init.",
            f"{RO}.engine_kwargs.vllm.swap_space", f"{RO}.engine_kwargs.vllm.disable_mm_preprocessor_cache",
            f"{RO}.engine_kwargs.sglang.attention_backend", f"{RO}.multi_turn.max_turns",
            f"{RO}.multi_turn.completion_callback", f"{RO}.chat_scheduler", f"{RO}.use_fire_sampling",
            f"{A}.checkpoint.contents", "critic.checkpoint.contents"]
_MEGATRON_ADD_05: Flat = {
    **under(f"{A}.megatron", {"dist_checkpointing_prefix": "", "override_ddp_config": {},
                              "override_mcore_model_config": {}, "forward_only": False, "dtype": "bfloat16",
                              "seed": 42}),
    **under(f"{A}.optim", {"betas": [0.9, 0.999], "optimizer": "adam", "override_optimizer_config": {}}),
    **under(f"{REF}.megatron", {"dist_checkpointing_prefix": "", "override_ddp_config": {},
                                "override_mcore_model_config": {}, "forward_only": False, "dtype": "bfloat16",
                                "seed": f"${{{A}.megatron.seed}}", "use_mbridge": f"${{{A}.megatron.use_mbridge}}"}),
    **under("critic.megatron", {"dist_checkpointing_prefix": "", "override_ddp_config": {},
                                "override_mcore_model_config": {}, "use_mbridge": False, "forward_only": False,
                                "dtype": "bfloat16", "seed": 42}),
    **under("critic.optim", {"betas": [0.9, 0.999], "optimizer": "adam", "lr_warmup_init": 0.0,
                             "lr_decay_steps": None, "lr_decay_style": "constant", "min_lr": 0.0,
                             "weight_decay_incr_style": "constant", "lr_wsd_decay_style": "exponential",
                             "lr_wsd_decay_steps": None, "use_checkpoint_opt_param_scheduler": False,
                             "override_optimizer_config": {}}),
    "critic.nccl_timeout": 600, f"{M}.override_config.model_config": {},
    f"{M}.override_config.moe_config.freeze_moe_router": False,
}

# ---------------------------------------------------------------------------------------------
# main (late 2025 onward): rollout correction, transfer queue, engine choice by `model_engine`,
# rollout parallel sizes, quantized rollouts, prometheus, dataset sample limits

_ADD_MAIN: Flat = {
    **under("data", {"train_max_samples": -1, "val_max_samples": -1, "return_raw_chat": True, "seed": None,
                     "image_patch_size": 14, "tool_config_path": f"${{{RO}.multi_turn.tool_config_path}}"}),
    **under(A, {"freeze_vision_tower": False, "data_loader_seed": None}),
    **under(RO, {"data_parallel_size": 1, "expert_parallel_size": 1, "pipeline_model_parallel_size": 1,
                 "enable_prefix_caching": True, "load_format": "dummy", "multi_turn.num_repeat_rollouts": None,
                 "agent.default_agent_loop": "single_turn_agent", "skip_tokenizer_init": True,
                 "prometheus.enable": False, "prometheus.port": 9090,
                 "prometheus.file": "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml",
                 "prometheus.served_model_name": f"${{{M}.path}}", "quantization": False,
                 "use_block_quant_rollout": True}),
    **under("reward_model", {"enable_resource_pool": False, "n_gpus_per_node": 0, "nnodes": 0, "nccl_timeout": 600}),
    **under("algorithm.rollout_correction", {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_rs": None,
                                             "rollout_rs_threshold": None, "rollout_rs_threshold_lower": None,
                                             "rollout_token_veto_threshold": None, "bypass_mode": False,
                                             "use_policy_gradient": False, "rollout_is_batch_normalize": False,
                                             "loss_type": "ppo_clip"}),
    "transfer_queue.enable": False, f"{M}.lora_adapter_path": None,
}
_DROP_MAIN = [f"{A}.tis_imp_ratio_cap", "algorithm.rollout_is", "algorithm.rollout_is_threshold",
              "algorithm.rollout_is_threshold_lower", "algorithm.rollout_is_level", "algorithm.rollout_is_mode",
              "algorithm.rollout_is_veto_threshold"]
_MEGATRON_ADD_MAIN: Flat = {
    "critic.load_weight": True, "critic.data_loader_seed": f"${{{A}.data_loader_seed}}",
    **under(f"{A}.megatron.override_transformer_config", {"recompute_granularity": None,
                                                           "recompute_modules": ["core_attn"],
                                                           "recompute_method": None, "recompute_num_layers": None,
                                                           "attention_backend": "flash"}),
    "reward_model.megatron.use_mbridge": f"${{{A}.megatron.use_mbridge}}", "reward_model.megatron.dtype": "bfloat16",
}
_DROP_MAIN_MEGATRON = [f"{A}.megatron.override_transformer_config", "critic.kl_ctrl.", f"{REF}.profile.",
                       f"{A}.profile.", f"{RO}.layer_name_map."]


def _families() -> tuple[Family, ...]:
    fsdp, megatron = _FSDP_03, _MEGATRON_03
    out = [Family("v0.3", "v0.3.0.post1 – v0.3.1", {"fsdp": fsdp, "megatron": megatron})]
    fsdp = evolve(fsdp, add={**_ADD_04, **_FSDP_ADD_04}, drop=_DROP_04)
    megatron = evolve(megatron, add={**_ADD_04, **_MEGATRON_ADD_04}, drop=_DROP_04)
    out.append(Family("v0.4", "v0.4.0 – v0.4.1", {"fsdp": fsdp, "megatron": megatron}))
    fsdp = evolve(fsdp, add=_ADD_05, drop=_DROP_05)
    megatron = evolve(megatron, add={**_ADD_05, **_MEGATRON_ADD_05}, drop=_DROP_05)
    out.append(Family("v0.5", "v0.5.0 – v0.6.x", {"fsdp": fsdp, "megatron": megatron}))
    fsdp = evolve(fsdp, add=_ADD_MAIN, drop=_DROP_MAIN)
    megatron = evolve(megatron, add={**_ADD_MAIN, **_MEGATRON_ADD_MAIN}, drop=_DROP_MAIN + _DROP_MAIN_MEGATRON)
    out.append(Family("main", "main (2025-11 onward)", {"fsdp": fsdp, "megatron": megatron}))
    return tuple(out)


NO_PROFILER = "profiling is not built (profiler_timeline / profiler_memory are planned)"
NO_CODE = "code named in a config is never imported"
COLOCATED = "colocated roles always offload their state between phases"

NOTES: dict[str, str] = {
    "*.profiler": NO_PROFILER, "*.profile": NO_PROFILER, "global_profiler": NO_PROFILER,
    "trainer.profile_steps": NO_PROFILER, "trainer.controller_nsight_options": NO_PROFILER,
    "trainer.worker_nsight_options": NO_PROFILER,
    "ray_kwargs": "the Ray cluster is started and sized by the platform",
    "ray_init": "the Ray cluster is started and sized by the platform",
    "transfer_queue": "batches move between roles through the driver; there is no transfer queue",
    "data.use_shm": "models and data are read from their paths; no shared-memory copy",
    f"{M}.use_shm": "models and data are read from their paths; no shared-memory copy",
    "critic.model.use_shm": "models and data are read from their paths; no shared-memory copy",
    "reward_model.model.use_shm": "models and data are read from their paths; no shared-memory copy",
    "data.return_full_prompt": "prompts are always kept with their chat template applied",
    "data.return_multi_modal_inputs": "multi-modal prompts are not supported",
    "data.image_patch_size": "multi-modal prompts are not supported",
    "data.trust_remote_code": "the tokenizer follows the model's trust_remote_code",
    "data.sampler": NO_CODE, "data.datagen": NO_CODE, "data.tool_config_path": "verl's tools are not supported",
    "data.apply_chat_template_kwargs": "the tokenizer's chat template is applied with its defaults",
    f"{M}.custom_chat_template": "the tokenizer's own chat template is used (data_args.template picks another)",
    f"{M}.enable_activation_offload": "activations are recomputed (gradient checkpointing), never offloaded",
    "critic.model.enable_activation_offload": "activations are recomputed (gradient checkpointing), never offloaded",
    f"{M}.use_fused_kernels": "log-probs are computed unfused",
    f"{M}.fused_kernel_options": "log-probs are computed unfused",
    "reward_model.model.use_fused_kernels": "log-probs are computed unfused",
    "reward_model.model.fused_kernel_options": "log-probs are computed unfused",
    f"{A}.use_fused_kernels": "log-probs are computed unfused",
    f"{M}.exclude_modules": "LoRA adapters go on lora_target modules only",
    "critic.model.lora_rank": "the critic trains all its weights", "critic.model.lora_alpha": "the critic trains all its weights",
    "critic.model.target_modules": "the critic trains all its weights",
    f"{A}.policy_loss": "clip-cov / kl-cov settings apply to verl's loss modes of that name only",
    f"{A}.checkpoint": "checkpoints always hold model, optimizer, scheduler and RNG state",
    "critic.checkpoint": "checkpoints always hold model, optimizer, scheduler and RNG state",
    f"{A}.optim.num_cycles": "the cosine schedule runs half a cycle", f"{A}.entropy_from_logits_with_chunking":
    "entropy is computed in one pass", f"{A}.entropy_checkpointing": "entropy is computed in one pass",
    f"{REF}.entropy_from_logits_with_chunking": "entropy is computed in one pass",
    f"{REF}.entropy_checkpointing": "entropy is computed in one pass",
    f"{A}.fsdp_config.forward_prefetch": "FSDP2 prefetches by itself",
    f"{REF}.fsdp_config.forward_prefetch": "FSDP2 prefetches by itself",
    "critic.model.fsdp_config.forward_prefetch": "FSDP2 prefetches by itself",
    "reward_model.model.fsdp_config.forward_prefetch": "FSDP2 prefetches by itself",
    f"{A}.freeze_vision_tower": "multi-modal models are not supported",
    f"{A}.data_loader_seed": "the data order follows the pipeline seed",
    "critic.data_loader_seed": "the data order follows the pipeline seed",
    f"{A}.load_weight": "weights always load from the model path",
    f"{REF}.load_weight": "weights always load from the model path", "critic.load_weight": "weights always load "
    "from the model path", "reward_model.load_weight": "weights always load from the model path",
    f"{REF}.model": "the reference loads the policy model",
    f"{REF}.sync_actor": "the reference stays the initial policy", f"{REF}.sync_actor_alpha": "the reference stays "
    "the initial policy", f"{REF}.sync_steps": "the reference stays the initial policy",
    f"{M}.gradient_checkpointing_kwargs": "Megatron recomputation follows recompute_granularity / recompute_method",
    "critic.model.gradient_checkpointing_kwargs": "Megatron recomputation follows recompute_granularity",
    f"{A}.megatron.override_ddp_config": "Megatron's DDP settings keep their defaults",
    f"{A}.megatron.override_mcore_model_config": "the model architecture comes from the HF config",
    f"{A}.megatron.override_transformer_config": "only the recompute_* settings are imported",
    f"{A}.megatron.use_mbridge": "Megatron weights are converted from the HF model at start",
    f"{A}.megatron.forward_only": "set by the role (reference: forward only)", f"{A}.megatron.dtype":
    "the dtype follows model_args.dtype", f"{A}.megatron.seed": "Megatron's seed follows the pipeline seed",
    f"{A}.megatron.dist_checkpointing_prefix": "checkpoints use the trainer's own format",
    "*.megatron.override_ddp_config": "Megatron's DDP settings keep their defaults",
    "*.megatron.override_mcore_model_config": "the model architecture comes from the HF config",
    "*.megatron.override_transformer_config": "only the actor's recompute_* settings are imported",
    "*.megatron.use_mbridge": "Megatron weights are converted from the HF model at start",
    "*.megatron.forward_only": "set by the role", "*.megatron.dtype": "the dtype follows model_args.dtype",
    "*.megatron.seed": "Megatron's seed follows the pipeline seed",
    "*.megatron.dist_checkpointing_prefix": "checkpoints use the trainer's own format",
    "*.megatron.grad_offload": COLOCATED, "*.megatron.optimizer_offload": COLOCATED,
    f"{A}.optim.lr_warmup_init": "warmup starts from 0", f"{A}.optim.lr_decay_steps": "the decay spans the whole run",
    f"{A}.optim.weight_decay_incr_style": "weight decay is constant", f"{A}.optim.lr_wsd_decay_style":
    "warmup-stable-decay schedules are not available", f"{A}.optim.lr_wsd_decay_steps":
    "warmup-stable-decay schedules are not available", f"{A}.optim.use_checkpoint_opt_param_scheduler":
    "the schedule follows this config, not the checkpoint", f"{A}.optim.override_optimizer_config":
    "optimizer settings come from training_args", "critic.optim": "the critic's schedule follows its lr, warmup "
    "and decay settings only", "critic.nccl_timeout": "collectives time out after backend_timeout minutes",
    f"{ARR}.nccl_timeout": "collectives time out after backend_timeout minutes (set it on each role)",
    "critic.loss_agg_mode": "one loss_agg_mode (the actor's) serves both roles",
    "critic.enable": "a critic exists exactly when adv_estimator is gae (or critic.enable is true)",
    f"{RO}.layer_name_map": "weights are synced by HF parameter name", f"{RO}.cudagraph_capture_sizes":
    "the engine picks its CUDA-graph sizes", f"{RO}.over_sample_rate": "every request of a batch is awaited",
    f"{RO}.multi_stage_wake_up": "the engine wakes in one stage", f"{RO}.engine_kwargs":
    "engine keyword arguments are not passed through; use the native strategy_config keys",
    f"{RO}.agent": "verl's agent loops are not supported (the agentic pipeline plays ROLL environments)",
    f"{RO}.multi_turn": "multi-turn settings apply only with multi_turn.enable, which is refused",
    f"{RO}.update_weights_bucket_megabytes": "weights are pushed in one pass per tensor",
    f"{RO}.layered_summon": "FSDP2 gathers the full state once per sync", f"{RO}.trace": NO_PROFILER,
    f"{RO}.skip_rollout": "rollouts are always generated", f"{RO}.skip_dump_dir": "rollouts are always generated",
    f"{RO}.skip_tokenizer_init": "the engine keeps its tokenizer", f"{RO}.prometheus": "engine metrics are "
    "not exported to Prometheus", f"{RO}.quantization": "rollouts run in the model's dtype",
    f"{RO}.use_block_quant_rollout": "rollouts run in the model's dtype",
    f"{RO}.data_parallel_size": "engines are laid out by device_mapping / tensor_parallel_size",
    f"{RO}.expert_parallel_size": "expert parallelism is not available in the engine",
    f"{RO}.pipeline_model_parallel_size": "pipeline-parallel engines are not built",
    f"{RO}.enable_prefix_caching": "prefix caching is set with the native enable_prefix_caching",
    "reward_model.sandbox_fusion": "code-execution rewards are not built",
    "reward_model.enable_resource_pool": "reward workers are placed by device_mapping",
    "reward_model.n_gpus_per_node": "reward workers are placed by device_mapping",
    "reward_model.nnodes": "reward workers are placed by device_mapping",
    "reward_model.nccl_timeout": "collectives time out after backend_timeout minutes",
    "reward_model.megatron": "reward models run forward-only (hf_infer)",
    "algorithm.use_pf_ppo": "prioritised (PF-PPO) resampling is not built",
    "algorithm.pf_ppo": "prioritised (PF-PPO) resampling is not built",
    "trainer.device": "GPU roles run on CUDA (CPU without device_mapping)",
    "trainer.esi_redundant_time": "no elastic-instance checkpoint timing", "trainer.val_only":
    "evaluation without training is `trainer validate`/eval_steps", "trainer.use_legacy_worker_impl":
    "workers are PolicyLab's own", "trainer.max_ref_ckpt_to_keep": "the reference is never checkpointed",
    "trainer.remove_previous_ckpt_in_save": "use max_ckpts_to_keep", "critic.kl_ctrl":
    "KL control is set in algorithm.kl_ctrl",
}
OPEN_SECTIONS: dict[str, str] = {
    f"{RO}.engine_kwargs.vllm": "engine keyword arguments are not passed through; use the native strategy_config keys",
    f"{RO}.engine_kwargs.sglang": "engine keyword arguments are not passed through; use the native "
    "strategy_config keys",
    f"{M}.override_config": "model config overrides (actor_train.model_args.model_config_kwargs)",
    "critic.model.override_config": "model config overrides (critic.model_args.model_config_kwargs)",
    "*.megatron.override_transformer_config": "only the actor's recompute_* settings are imported",
    f"{A}.optim.override_optimizer_config": "optimizer settings come from training_args",
    "ray_kwargs.ray_init": "the Ray cluster is started and sized by the platform",
    "global_profiler.global_tool_config": NO_PROFILER,
    "reward": "verl main's reward-loop section; rewards here are chosen by rewards.*.reward_type",
    "distillation": "on-policy distillation is not built", "transfer_queue": "batches move between roles through "
    "the driver; there is no transfer queue",
    "model_engine": "the training backend is chosen by actor.strategy (megatron or fsdp)",
    "trainer.use_v1": "workers are PolicyLab's own",
}

BUILTINS: dict[str, BuiltinConfig] = {
    "ppo_trainer": BuiltinConfig("fsdp"), "ppo_megatron_trainer": BuiltinConfig("megatron"),
    "actor/dp_actor": BuiltinConfig("fsdp", A), "actor/megatron_actor": BuiltinConfig("megatron", A),
    "ref/dp_ref": BuiltinConfig("fsdp", REF), "ref/megatron_ref": BuiltinConfig("megatron", REF),
    "rollout/rollout": BuiltinConfig("fsdp", RO), "model/hf_model": BuiltinConfig("fsdp", M),
    "critic/dp_critic": BuiltinConfig("fsdp", "critic"), "critic/megatron_critic": BuiltinConfig("megatron", "critic"),
    "data/legacy_data": BuiltinConfig("fsdp", "data"),
    "reward_model/dp_reward_model": BuiltinConfig("fsdp", "reward_model"),
    "reward_model/megatron_reward_model": BuiltinConfig("megatron", "reward_model"),
    "algorithm/rollout_correction": BuiltinConfig("fsdp", "algorithm.rollout_correction"),
    "model_engine/dp": BuiltinConfig("fsdp", "model_engine"), "model_engine/fsdp": BuiltinConfig("fsdp", "model_engine"),
    "model_engine/megatron": BuiltinConfig("megatron", "model_engine"),
}

SURFACE = Surface(
    framework="verl", families=_families(), notes=NOTES, open_sections=OPEN_SECTIONS, builtins=BUILTINS,
    variant_choice={"megatron": "megatron", "dp": "fsdp", "fsdp": "fsdp", "fsdp2": "fsdp"}, variant_key=f"{A}.strategy",
)
