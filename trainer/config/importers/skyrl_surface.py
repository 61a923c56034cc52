"""SkyRL (skyrl-train) config surface per release family, as data: ppo_base_config.yaml with the
deepspeed_config and skyrl_gym_config groups it composes, and later the typed SkyRLConfig tree.

Families: early (before v0.1.0: `use_kl_estimator_k3`, `ppo_loss_type`), v0.1 (v0.1.0 – v0.2.x:
`kl_estimator_type`, `policy_loss_type`, `loss_reduction`, schedulers, dynamic sampling, TIS), v0.3
(v0.3.0 – v0.4.x: LoRA, Megatron, the reference's own model path, stop strings, chat templates; v0.4's
off_policy_correction, LoRA init_method, log_path, generator.model_name) and
main (2026: inference-engine settings moved under `generator.inference_engine`, fully-async
training, SAPO/CISPO/clip-cov/kl-cov losses).
"""

from __future__ import annotations

from typing import Any

from trainer.config.importers.surface import BuiltinConfig, Family, Flat, Surface, evolve, under

T, G, ALG, PL = "trainer", "generator", "trainer.algorithm", "trainer.placement"
FSDP = {"cpu_offload": False, "reshard_after_forward": True, "fsdp_size": -1}
OPTIM = {"lr": 1e-6, "adam_betas": [0.9, 0.999], "weight_decay": 1e-2, "max_grad_norm": 1.0,
         "offload_after_step": True, "num_warmup_steps": 0}
SAMPLING = {"max_generate_length": 1024, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0, "top_k": -1}
_DS_TRAIN: dict[str, Any] = {
    "zero_optimization.stage": 3, "zero_optimization.offload_param.device": "none",
    "zero_optimization.offload_optimizer.device": "none", "zero_optimization.offload_optimizer.pin_memory": True,
    "zero_optimization.sub_group_size": "auto", "zero_optimization.stage3_max_live_parameters": "auto",
    "zero_optimization.stage3_max_reuse_distance": "auto",
    "zero_optimization.stage3_param_persistence_threshold": "auto",
    "zero_optimization.stage3_prefetch_bucket_size": "auto", "zero_optimization.reduce_bucket_size": "auto",
    "zero_optimization.zero_hpz_partition_size": 1, "bf16.enabled": True, "gradient_clipping": 1.0,
    "prescale_gradients": False, "wall_clock_breakdown": False, "data_types.grad_accum_dtype": "fp32",
}
_DS_EVAL: dict[str, Any] = {
    "zero_optimization.stage": 3, "zero_optimization.stage3_param_persistence_threshold": "auto",
    "zero_optimization.offload_param.device": "none", "zero_optimization.offload_param.pin_memory": True,
    "bf16.enabled": True, "gradient_clipping": 1.0, "prescale_gradients": False, "wall_clock_breakdown": False,
}
_GYM: Flat = under("environment.skyrl_gym", {
    "max_env_workers": 32, "text2sql.db_path": "~/default_db", "llm_as_a_judge.model": "gpt-4o-mini",
    "llm_as_a_judge.base_url": None, "search.log_requests": False, "search.search_url": "http://127.0.0.1:8000/retrieve",
    "search.topk": 3, "search.timeout": 30,
})
_ENGINE_EARLY: dict[str, Any] = {
    "model_dtype": "bfloat16", "run_engines_locally": True, "num_inference_engines": 1, "backend": "vllm",
    "weight_sync_backend": "nccl", "inference_engine_tensor_parallel_size": 4, "async_engine": True,
    "vllm_v1_disable_multiproc": True, "enable_prefix_caching": True, "enable_chunked_prefill": True,
    "max_num_batched_tokens": 8192, "enforce_eager": False, "gpu_memory_utilization": 0.8, "max_num_seqs": 1024,
    "remote_inference_engine_urls": ["127.0.0.1:8001"], "override_existing_update_group": "auto",
}

_EARLY: Flat = {
    "data.train_data": ["~/data/gsm8k/train.parquet"], "data.val_data": ["~/data/gsm8k/validation.parquet"],
    **under(PL, {"colocate_all": True, "colocate_policy_ref": True, "colocate_critic_reward": False,
                 "policy_num_nodes": 1, "policy_num_gpus_per_node": 4, "critic_num_nodes": 1,
                 "critic_num_gpus_per_node": 4, "ref_num_nodes": 1, "ref_num_gpus_per_node": 4,
                 "reward_num_nodes": 1, "reward_num_gpus_per_node": 4}),
    **under(T, {"sequence_parallel_backend": "ulysses", "strategy": "fsdp2",
                "policy.model.path": "Qwen/Qwen2.5-1.5B-Instruct", "policy.deepspeed_config": "${deepspeed_config.train}",
                **under("policy.optimizer_config", OPTIM), **under("policy.fsdp_config", FSDP),
                "policy.sequence_parallel_size": 1, "policy.use_torch_compile": False, "policy.record_memory": False,
                "ref.sequence_parallel_size": 1, "ref.deepspeed_config": "${deepspeed_config.eval}",
                **under("ref.fsdp_config", {**FSDP, "cpu_offload": True}),
                "critic.model.path": None, "critic.deepspeed_config": "${deepspeed_config.train}",
                **under("critic.optimizer_config", {**OPTIM, "lr": 5.0e-6}), **under("critic.fsdp_config", FSDP),
                "critic.sequence_parallel_size": 1,
                "reward.model.path": None, "reward.deepspeed_config": "${deepspeed_config.eval}",
                **under("reward.fsdp_config", {**FSDP, "cpu_offload": True}), "reward.sequence_parallel_size": 1,
                "gradient_checkpointing": True, "gradient_checkpointing_use_reentrant": False, "seed": 42,
                "resume_mode": "latest", "resume_path": None, "ckpt_path": "~/ckpts/", "max_ckpts_to_keep": -1,
                "ckpt_interval": 10, "hf_save_interval": -1, "export_path": "~/exports/", "bf16": True,
                "epochs": 1, "update_epochs_per_batch": 1, "train_batch_size": 1024, "policy_mini_batch_size": 256,
                "critic_mini_batch_size": 256, "micro_train_batch_size_per_gpu": 1,
                "micro_forward_batch_size_per_gpu": 1, "update_ref_every_epoch": False, "use_sample_packing": True,
                "eval_batch_size": 1024, "eval_before_train": True, "eval_interval": 5, "max_prompt_length": 512,
                "flash_attn": True, "disable_fast_tokenizer": False, "target_modules": "all-linear",
                "use_orm_score": False, "project_name": "skyrl", "run_name": "test_run", "logger": "wandb",
                "dump_data_batch": False, "dump_eval_results": True}),
    **under(ALG, {"advantage_estimator": "grpo", "kl_target": None, "init_kl_coef": 0.0, "use_kl_estimator_k3": True,
                  "use_abs_kl": False, "use_kl_in_reward": False, "use_kl_loss": True, "kl_loss_coef": 0.001,
                  "advantage_batch_normalize": False, "value_head_prefix": "value_head", "ppo_loss_type": "regular",
                  "lambd": 1.0, "gamma": 1.0, "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0,
                  "value_clip": 0.2, "normalize_reward": True}),
    **under(G, {**_ENGINE_EARLY, "n_samples_per_prompt": 5, "batched": True,
                "max_input_length": "${trainer.max_prompt_length}", "max_turns": 1, **under("sampling_params", SAMPLING),
                "use_conversation_multi_turn": False,
                **under("eval_sampling_params", {**SAMPLING,
                                                 "max_generate_length": "${generator.sampling_params.max_generate_length}"}),
                "eval_n_samples_per_prompt": 1, "zero_reward_on_non_stop": False}),
    "environment.env_class": "gsm8k", "environment.max_env_workers": 10,
    **under("deepspeed_config.train", _DS_TRAIN), **under("deepspeed_config.eval", _DS_EVAL), **_GYM,
}

_ADD_V01: Flat = {
    **under(ALG, {"kl_ctrl.type": "fixed", "kl_ctrl.kl_target": 0.1, "kl_ctrl.horizon": 10000,
                  "kl_estimator_type": "k3", "use_kl_estimator_k3": False, "policy_loss_type": "regular",
                  "loss_reduction": "token_mean", "grpo_norm_by_std": True, "tis_imp_ratio_cap": -1.0,
                  "use_tis": False, "dynamic_sampling.type": None, "dynamic_sampling.max_sample_batches": 30,
                  "dynamic_sampling.min_replace_ratio": 0.3}),
    f"{T}.policy.optimizer_config.scheduler": "constant_with_warmup",
    f"{T}.critic.optimizer_config.scheduler": "constant_with_warmup",
    f"{T}.s3_export.enabled": False, f"{T}.s3_export.bucket": None, f"{T}.s3_export.prefix": "checkpoints/${trainer.run_name}",
    f"{G}.weight_transfer_threshold_cuda_ipc_GB": 1.0, f"{G}.batched": False, f"{G}.use_conversation_multi_turn": True,
    f"{G}.sampling_params.logprobs": None, f"{G}.eval_sampling_params.logprobs": None,
    f"{G}.eval_sampling_params.temperature": 0.0, f"{G}.apply_overlong_filtering": False,
}
_DROP_V01 = [f"{ALG}.kl_target", f"{ALG}.init_kl_coef", f"{ALG}.ppo_loss_type", "environment.max_env_workers"]

_LORA = {"rank": 0, "alpha": 16, "dropout": 0.0, "lora_sync_path": "/tmp/skyrl_lora_sync",
         "target_modules": "all-linear", "exclude_modules": None}
_MEGATRON = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
             "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None,
             "ddp_config.grad_reduce_in_fp32": True, "ddp_config.overlap_grad_reduce": False,
             "ddp_config.overlap_param_gather": False, "ddp_config.average_in_collective": True,
             "torch_profiler_config.enable": False, "torch_profiler_config.ranks": [],
             "torch_profiler_config.save_path": None, "lora_config.lora_type": "lora",
             "optimizer_config_kwargs": {}, "transformer_config_kwargs": {}, "empty_cuda_cache": None,
             "model_config_kwargs": {}}
_ADD_V03: Flat = {
    **under(f"{T}.policy.model.lora", _LORA), **under(f"{T}.critic.model.lora", _LORA),
    f"{T}.ref.model.path": "Qwen/Qwen2.5-1.5B-Instruct",
    **under(f"{T}.policy.megatron_config", _MEGATRON), **under(f"{T}.ref.megatron_config", _MEGATRON),
    **{f"{T}.{role}.fsdp_config.{key}": value for role in ("policy", "ref", "critic")
       for key, value in {"mixed_precision": None, "wrap_policy": {}}.items()},
    **{f"{T}.{role}.model_config_kwargs": {} for role in ("policy", "ref", "critic")},
    **under(ALG, {"use_entropy_loss": False, "entropy_loss_coef": 0.01, "zero_variance_filter": False,
                  "clip_cov.clip_ratio": 0.0002, "clip_cov.clip_cov_lb": 1.0, "clip_cov.clip_cov_ub": 5.0,
                  "kl_cov.kl_cov_frac": 0.2, "kl_cov.ppo_kl_coef": 1.0, "max_seq_len": None}),
    **under(G, {"sampling_params.stop": None, "sampling_params.repetition_penalty": 1.0,
                "sampling_params.additional_kwargs": None, "sampling_params.logprobs": 0,
                "eval_sampling_params.stop": None, "eval_sampling_params.repetition_penalty": 1.0,
                "eval_sampling_params.additional_kwargs": None, "eval_sampling_params.logprobs": 0,
                "chat_template.source": "name", "chat_template.name_or_path": None, "chat_template_kwargs": {},
                "append_eos_token_after_stop_str_in_multi_turn": True, "rope_scaling": None, "rope_theta": None,
                "step_wise_trajectories": False, "engine_init_kwargs": {}, "inference_engine_pipeline_parallel_size": 1,
                "inference_engine_expert_parallel_size": 1, "inference_engine_data_parallel_size": 1,
                "enable_http_endpoint": False, "http_endpoint_host": "127.0.0.1", "http_endpoint_port": 8000,
                "served_model_name": None, "fully_sharded_loras": False, "enable_ray_prometheus_stats": False,
                "enforce_eager": True}),
    f"{T}.rope_scaling": None, f"{T}.rope_theta": None,
    # v0.4: rollout-vs-trainer importance correction, LoRA init, infra log path, the engine's model name, and the
    # new inference layer's URLs (flat under generator until main moved them into generator.inference_engine)
    **under(f"{ALG}.off_policy_correction", {
        "tis_ratio_type": None, "token_tis_ratio_clip_high": 2.0, "sequence_tis_ratio_clip_high": 5.0,
        "sequence_mask_metric": None, "geo_mask_high": 1.01, "geo_mask_low": 0.99, "product_mask_high": 2.0,
        "product_mask_low": 0.5, "outlier_token_is_threshold_low": None, "outlier_token_is_threshold_high": None}),
    f"{T}.policy.model.lora.init_method": "kaiming", f"{T}.critic.model.lora.init_method": "kaiming",
    f"{T}.log_path": "/tmp/skyrl-logs", f"{T}.exclude_modules": None,
    f"{G}.model_name": "${trainer.policy.model.path}", f"{G}.external_proxy_url": None,
    f"{G}.external_server_urls": None,
}
_DROP_V03 = [f"{PL}.colocate_critic_reward", f"{PL}.reward_num_nodes", f"{PL}.reward_num_gpus_per_node",
             f"{T}.reward.", f"{T}.target_modules", f"{T}.use_orm_score", f"{ALG}.use_kl_estimator_k3",
             f"{ALG}.use_abs_kl"]

_ENGINE_RENAMES = {"num_inference_engines": "num_engines", "inference_engine_tensor_parallel_size": "tensor_parallel_size",
                   "inference_engine_pipeline_parallel_size": "pipeline_parallel_size",
                   "inference_engine_expert_parallel_size": "expert_parallel_size",
                   "inference_engine_data_parallel_size": "data_parallel_size",
                   "remote_inference_engine_urls": "remote_urls"}
_ENGINE_KEYS = [*_ENGINE_EARLY, "weight_transfer_threshold_cuda_ipc_GB", "enable_http_endpoint", "http_endpoint_host",
                "http_endpoint_port", "served_model_name", "engine_init_kwargs", "fully_sharded_loras",
                "enable_ray_prometheus_stats", *[k for k in _ENGINE_RENAMES if k not in _ENGINE_EARLY]]


def _main(previous: Flat) -> Flat:
    moved = {f"{G}.inference_engine.{_ENGINE_RENAMES.get(key, key)}": previous[f"{G}.{key}"]
             for key in _ENGINE_KEYS if f"{G}.{key}" in previous}
    return evolve(previous, add={
        **moved, f"{G}.inference_engine.external_proxy_url": None, f"{G}.inference_engine.external_server_urls": None,
        f"{G}.max_input_length": 512, f"{T}.fully_async.max_staleness_steps": 4,
        f"{T}.fully_async.num_parallel_generation_workers": 768, f"{ALG}.sapo.tau_pos": 1.0,
        f"{ALG}.sapo.tau_neg": 1.05, f"{ALG}.cispo.cispo_eps_clip_low": 0.0, f"{ALG}.cispo.cispo_eps_clip_high": 5.0,
        f"{ALG}.off_policy_correction.token_mask_is_threshold_low": None,
        f"{ALG}.off_policy_correction.token_mask_is_threshold_high": None,
        f"{T}.policy.optimizer_config.scheduler": "constant_with_warmup",
    }, drop=[f"{G}.{key}" for key in _ENGINE_KEYS] + [f"{T}.s3_export.", f"{T}.sequence_parallel_backend",
                                                      f"{G}.external_proxy_url", f"{G}.external_server_urls"])


def _families() -> tuple[Family, ...]:
    early = _EARLY
    v01 = evolve(early, add=_ADD_V01, drop=_DROP_V01)
    v03 = evolve(v01, add=_ADD_V03, drop=_DROP_V03)
    return (Family("early", "before v0.1.0 (2025-06)", {"fsdp": early}),
            Family("v0.1", "v0.1.0 – v0.2.x", {"fsdp": v01}),
            Family("v0.3", "v0.3.0 – v0.4.x", {"fsdp": v03}),
            Family("main", "main (2026)", {"fsdp": _main(v03)}))


NO_DEBUG = "a debugging aid of SkyRL with no native counterpart"
MULTI_TURN = "SkyRL's multi-turn environments are not supported (the agentic pipeline plays ROLL environments)"
NOTES: dict[str, str] = {
    "deepspeed_config": "templates that trainer.*.deepspeed_config reference; their values arrive through them",
    "environment.skyrl_gym": "rewards are built-in functions (rewards.*.reward_type); environment settings do not apply",
    "environment.max_env_workers": "rewards are computed by the reward workers",
    f"{T}.sequence_parallel_backend": "sequence parallelism is Ulysses (FSDP only)",
    f"{T}.gradient_checkpointing_use_reentrant": "gradient checkpointing uses the model's default",
    f"{T}.bf16": "precision follows model_args.dtype and the strategy's mixed precision",
    f"{T}.disable_fast_tokenizer": "the tokenizer's own default is used",
    f"{T}.target_modules": "LoRA targets are model_args.lora_target", f"{T}.use_orm_score": "rewards come from the "
    "reward functions", f"{T}.s3_export": "checkpoints stay in the run directory (no S3 export)",
    f"{T}.reward": "SkyRL rewards come from the environment; there is no reward model to place",
    f"{T}.rope_scaling": "set RoPE scaling through model_args.model_config_kwargs",
    f"{T}.rope_theta": "set RoPE theta through model_args.model_config_kwargs",
    f"{T}.fully_async": "asynchronous rollout is set with rollout_mode / max_staleness",
    f"{T}.policy.fsdp_config.mixed_precision": "FSDP2 mixed precision is param_dtype / reduce_dtype",
    f"{T}.policy.fsdp_config.wrap_policy": "FSDP2 shards each decoder layer; the wrap policy is fixed",
    f"{T}.ref.fsdp_config.mixed_precision": "FSDP2 mixed precision is param_dtype / reduce_dtype",
    f"{T}.ref.fsdp_config.wrap_policy": "FSDP2 shards each decoder layer; the wrap policy is fixed",
    f"{T}.critic.fsdp_config.mixed_precision": "FSDP2 mixed precision is param_dtype / reduce_dtype",
    f"{T}.critic.fsdp_config.wrap_policy": "FSDP2 shards each decoder layer; the wrap policy is fixed",
    f"{T}.policy.model_config_kwargs": "model config overrides are actor_train.model_args.model_config_kwargs",
    f"{T}.ref.model_config_kwargs": "the reference loads the model as it is stored",
    f"{T}.critic.model_config_kwargs": "model config overrides are critic.model_args.model_config_kwargs",
    f"{T}.policy.model.lora.lora_sync_path": "the adapter synced to vLLM (enable_lora) goes through a folder in /dev/shm",
    f"{T}.policy.model.lora.exclude_modules": "LoRA adapters go on lora_target modules only",
    f"{T}.critic.model.lora": "the critic trains all its weights",
    f"{T}.policy.megatron_config": "used when trainer.strategy is megatron",
    f"{T}.ref.megatron_config": "the reference follows the policy's Megatron layout",
    f"{ALG}.kl_ctrl": "KL control applies with use_kl_in_reward",
    f"{ALG}.dynamic_sampling": "dynamic sampling (filter / replace) is not built",
    f"{ALG}.zero_variance_filter": "groups without reward variance are kept (difficulty_mask drops solved or "
    "unsolved prompts)", f"{ALG}.clip_cov": "clip-cov applies to SkyRL's loss of that name only",
    f"{ALG}.kl_cov": "kl-cov applies to SkyRL's loss of that name only", f"{ALG}.sapo": "SAPO is not built",
    f"{ALG}.cispo": "CISPO is not built", f"{ALG}.max_seq_len": "loss normalisation uses response_length",
    f"{G}.weight_transfer_threshold_cuda_ipc_GB": "weights are pushed by the trainer in one pass",
    f"{G}.inference_engine.weight_transfer_threshold_cuda_ipc_GB": "weights are pushed by the trainer in one pass",
    f"{G}.sampling_params.logprobs": "rollout log-probs are always computed",
    f"{G}.eval_sampling_params.logprobs": "rollout log-probs are always computed",
    f"{G}.sampling_params.additional_kwargs": "sampling settings are the native generating_args keys",
    f"{G}.eval_sampling_params.additional_kwargs": "sampling settings are the native generating_args keys",
    f"{G}.eval_sampling_params.stop": "evaluation stops where training generation does",
    f"{G}.eval_sampling_params.repetition_penalty": "evaluation uses the training repetition penalty",
    f"{G}.chat_template": "the tokenizer's chat template is used (data_args.template picks another)",
    f"{G}.chat_template_kwargs": "the tokenizer's chat template is applied with its defaults",
    f"{G}.append_eos_token_after_stop_str_in_multi_turn": MULTI_TURN, f"{G}.step_wise_trajectories": MULTI_TURN,
    f"{G}.rope_scaling": "set RoPE scaling through model_args.model_config_kwargs",
    f"{G}.rope_theta": "set RoPE theta through model_args.model_config_kwargs",
    f"{G}.apply_overlong_filtering": "truncated responses stay in the loss (max_len_mask is planned)",
    f"{G}.engine_init_kwargs": "engine keyword arguments are not passed through; use strategy_config keys",
    f"{G}.inference_engine.engine_init_kwargs": "engine keyword arguments are not passed through",
    f"{G}.enable_http_endpoint": "engines serve the trainer only", f"{G}.http_endpoint_host": "engines serve "
    "the trainer only", f"{G}.http_endpoint_port": "engines serve the trainer only",
    f"{G}.served_model_name": "engines serve the trainer only",
    f"{G}.inference_engine.enable_http_endpoint": "engines serve the trainer only",
    f"{G}.inference_engine.http_endpoint_host": "engines serve the trainer only",
    f"{G}.inference_engine.http_endpoint_port": "engines serve the trainer only",
    f"{G}.inference_engine.served_model_name": "engines serve the trainer only",
    f"{G}.inference_engine.external_proxy_url": "remote inference engines are not supported",
    f"{G}.inference_engine.external_server_urls": "remote inference engines are not supported",
    f"{G}.fully_sharded_loras": "vLLM's fully sharded LoRA kernels are not selected (enable_lora serves the adapter)",
    f"{G}.inference_engine.fully_sharded_loras": "vLLM's fully sharded LoRA kernels are not selected (enable_lora "
    "serves the adapter)",
    f"{G}.enable_ray_prometheus_stats": "engine metrics are not exported to Prometheus",
    f"{G}.inference_engine.enable_ray_prometheus_stats": "engine metrics are not exported to Prometheus",
    f"{G}.inference_engine_expert_parallel_size": "expert parallelism is not available in the engine",
    f"{G}.inference_engine.expert_parallel_size": "expert parallelism is not available in the engine",
    f"{G}.inference_engine_data_parallel_size": "engines are laid out by num_inference_engines",
    f"{G}.inference_engine.data_parallel_size": "engines are laid out by num_engines",
    f"{G}.inference_engine_pipeline_parallel_size": "pipeline-parallel engines are not built",
    f"{G}.inference_engine.pipeline_parallel_size": "pipeline-parallel engines are not built",
    f"{ALG}.init_kl_coef": "KL in the reward is weighted by kl_loss_coef (init_kl_coef), as in SkyRL from v0.1",
    f"{T}.policy.model.lora.init_method": "LoRA adapters start from PEFT's default initialisation",
    f"{T}.log_path": "logs go to the run directory (events.jsonl and the trainer log)",
    f"{T}.exclude_modules": "LoRA adapters go on lora_target modules only",
    f"{G}.model_name": "the engine serves actor_infer's model (model_args.model_name_or_path)",
    f"{G}.external_proxy_url": "remote inference engines are not supported",
    f"{G}.external_server_urls": "remote inference engines are not supported",
    f"{ALG}.kl_target": "the KL target is kl_ctrl.kl_target (SkyRL v0.1 on) with an adaptive controller",
}
OPEN_SECTIONS: dict[str, str] = {
    "deepspeed_config": "DeepSpeed templates; their values arrive through trainer.*.deepspeed_config",
    f"{T}.policy.deepspeed_config": "used when trainer.strategy is deepspeed",
    f"{T}.ref.deepspeed_config": "used when trainer.strategy is deepspeed",
    f"{T}.critic.deepspeed_config": "used when trainer.strategy is deepspeed",
    f"{T}.reward.deepspeed_config": "SkyRL rewards come from the environment",
    "environment.skyrl_gym": "rewards are built-in functions (rewards.*.reward_type); environment settings do not apply",
    f"{T}.policy.megatron_config.optimizer_config_kwargs": "Megatron's optimizer keeps its defaults",
    f"{T}.policy.megatron_config.transformer_config_kwargs": "only recompute_* settings are imported",
    f"{T}.policy.megatron_config.model_config_kwargs": "the architecture comes from the HF config",
    f"{T}.ref.megatron_config": "the reference follows the policy's Megatron layout",
    f"{G}.engine_init_kwargs": "engine keyword arguments are not passed through",
    f"{G}.inference_engine.engine_init_kwargs": "engine keyword arguments are not passed through",
    f"{G}.chat_template_kwargs": "the tokenizer's chat template is applied with its defaults",
}
BUILTINS: dict[str, BuiltinConfig] = {
    "ppo_base_config": BuiltinConfig("fsdp"),
    "deepspeed_config/train": BuiltinConfig("fsdp", "deepspeed_config.train"),
    "deepspeed_config/eval": BuiltinConfig("fsdp", "deepspeed_config.eval"),
    "skyrl_gym_config/default": BuiltinConfig("fsdp", "environment.skyrl_gym", package="environment.skyrl_gym"),
    "megatron_config/policy": BuiltinConfig("fsdp", f"{T}.policy.megatron_config"),
    "megatron_config/ref": BuiltinConfig("fsdp", f"{T}.ref.megatron_config"),
}

SURFACE = Surface(framework="skyrl", families=_families(), notes=NOTES, open_sections=OPEN_SECTIONS,
                  builtins=BUILTINS)
