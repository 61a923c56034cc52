"""RLinf's reasoning-RL config surface, as data: the keys of its math examples (GRPO, DAPO, PPO with a
critic, GSPO, MoE) for the Megatron and FSDP training backends.

RLinf ships no base config that examples compose on: every example is a whole file. One family,
"current" (2025-09 onward, the `examples/reasoning/config/math/*.yaml` layout with `rollout.model`,
`actor.fsdp_config` from `../training_backend/fsdp`, `critic` mirroring `actor`).
"""

from __future__ import annotations

from typing import Any

from trainer.config.importers.surface import BuiltinConfig, Family, Flat, Surface, under

_ARCH: dict[str, Any] = {
    "precision": "bf16", "add_bias_linear": False, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
    "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None, "moe_grouped_gemm": None,
    "activation": "swiglu", "sequence_parallel": False, "recompute_method": None, "recompute_granularity": None,
    "recompute_num_layers": None, "seq_length": "${runner.seq_length}", "encoder_seq_length": "${runner.seq_length}",
    "normalization": "rmsnorm", "position_embedding_type": "rope", "apply_rope_fusion": True,
    "bias_dropout_fusion": False, "persist_layer_norm": False, "bias_activation_fusion": False,
    "attention_softmax_in_fp32": True, "batch_p2p_comm": False, "variable_seq_lengths": True,
    "gradient_accumulation_fusion": False, "moe_token_dispatcher_type": "alltoall", "use_cpu_initialization": False,
    "moe_router_load_balancing_type": "aux_loss", "init_method_std": 0.02, "moe_router_topk": 2,
    "moe_router_pre_softmax": False, "moe_aux_loss_coeff": 0.0, "megatron_checkpoint": None,
}
_OPTIM: dict[str, Any] = {
    "optimizer": "adam", "bf16": True, "fp16": False, "lr": 1e-6, "adam_beta1": 0.9, "adam_beta2": 0.999,
    "adam_eps": 1e-8, "min_lr": 1e-7, "weight_decay": 0.01, "use_distributed_optimizer": True,
    "overlap_grad_reduce": False, "overlap_param_gather": False, "optimizer_enable_pin": False,
    "overlap_param_gather_with_optimizer_step": False, "clip_grad": 1.0, "loss_scale": None,
    "loss_scale_window": None,
}
_LR_SCHED: dict[str, Any] = {
    "lr_warmup_fraction": 0.0, "lr_warmup_init": 0.0, "lr_warmup_iters": 0, "max_lr": 1e-6, "min_lr": 0.0,
    "lr_decay_style": "constant", "lr_decay_iters": None, "start_weight_decay": None, "end_weight_decay": None,
}
_TOKENIZER = {"tokenizer_model": "${rollout.model.model_path}", "use_fast": False, "trust_remote_code": True,
              "padding_side": "right"}
def _convertor(role: str) -> dict[str, Any]:
    return {"model": "DeepSeek-R1-Distill-Qwen-1.5B", "model_type": None, "hf_model_path": "${rollout.model.model_path}",
            "save_path": f"${{runner.output_dir}}/${{runner.experiment_name}}/converted_ckpts/{role}", "use_gpu_num": 0,
            "use_gpu_index": None, "process_num": 16,
            **{key: f"${{{role}.model.{key}}}" for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                            "expert_model_parallel_size",
                                                            "expert_tensor_parallel_size")},
            "grouped_gemm": f"${{{role}.model.moe_grouped_gemm}}", "te_ln_linear_qkv": True,
            "te_ln_linear_mlp_fc1": True, "te_ln_add_extra_state": None}
_PROFILER = {"output_dir": "${runner.output_dir}/${runner.experiment_name}/profiler", "activities": ["cpu", "cuda"],
             "record_shapes": False, "profile_memory": False, "with_stack": False, "with_flops": False,
             "with_modules": True, "export_tensorboard": True, "export_chrome_trace": False,
             "chrome_filename_prefix": "chrome_trace", "schedule_warmup": 2, "schedule_active": 1,
             "schedule_repeat": 1}
_MEGATRON = {"ddp_bucket_size": None, "distributed_backend": "nccl", "distributed_timeout_minutes": 30,
             "ckpt_format": "torch", "use_dist_ckpt": False, "tp_comm_bootstrap_backend": "nccl",
             "tp_comm_overlap_cfg": None, "use_hf_ckpt": True, "use_profiler": False, **under("profiler", _PROFILER)}
FSDP_CONFIG: dict[str, Any] = {
    "strategy": "fsdp", "sharding_strategy": "full_shard", "hybrid_shard_size": -1, "gradient_checkpointing": False,
    "cpu_offload": False, "offload_pin_memory": False, "reshard_after_forward": True,
    "enable_gradient_accumulation": True, "forward_prefetch": False, "limit_all_gathers": False,
    "backward_prefetch": None, "use_orig_params": False, "use_liger_kernel": False, "fsdp_size": -1,
    "mixed_precision.param_dtype": None, "mixed_precision.reduce_dtype": None, "mixed_precision.buffer_dtype": None,
    "amp_autocast.enabled": False, "amp_autocast.precision": "bf16", "grad_scaler.enabled": False,
    "grad_scaler.init_scale": 65536.0, "grad_scaler.growth_interval": 2000, "amp_grad_scaler.enabled": False,
}


def _worker(role: str, backend: str) -> Flat:
    keys: dict[str, Any] = {
        "group_name": f"{role.capitalize()}Group", "training_backend": backend, "seed": 1234, "calculate_flops": False,
        **under("optim", _OPTIM), **under("lr_sched", _LR_SCHED), **under("tokenizer", _TOKENIZER),
        "model.model_path": None, "model.model_type": None,
    }
    if backend == "megatron":
        keys |= {"mcore_gpt": True, "spec_name": "decoder_gpt", "checkpoint_load_path": None, "offload_optimizer": True,
                 "offload_weight": True, "offload_grad": True, "enable_dp_load_balance": False,
                 **under("model", _ARCH), **under("megatron", {**_MEGATRON, **under("ckpt_convertor",
                                                                                  _convertor(role))})}
    else:
        keys |= {"enable_offload": False, "global_batch_size": 8, "micro_batch_size": 1, "model.precision": "bf16",
                 "model.is_lora": False, "model.seq_length": "${runner.seq_length}",
                 "model.encoder_seq_length": "${runner.seq_length}", **under("fsdp_config", FSDP_CONFIG)}
    return under(role, keys)


_COMMON: Flat = {
    "cluster.num_nodes": 1, "cluster.component_placement": {"actor,rollout,reward": "all"},
    **under("runner", {"task_type": "reasoning", "logger.log_path": "${runner.output_dir}/${runner.experiment_name}",
                       "logger.project_name": "rlinf", "logger.experiment_name": "${runner.experiment_name}",
                       "logger.logger_backends": ["tensorboard"], "max_epochs": 5, "max_steps": -1,
                       "val_check_interval": 1, "save_interval": 50, "seq_length": 2048,
                       "enable_dynamic_batch_size": False, "max_tokens_per_mbs": 2048, "resume_dir": None,
                       "experiment_name": "grpo-1.5b", "output_dir": "../results"}),
    **under("algorithm", {
        "group_size": 8, "n_minibatches": 4, "training_batch_size_per_gpu": 1, "rollout_batch_size_per_gpu": None,
        "logprob_forward_micro_batch_size": 1, "val_rollout_batch_size_per_gpu": 4, "recompute_logprobs": True,
        "shuffle_rollout": False, "loss_type": "actor", "loss_agg_func": "token-mean", "kl_beta": 0.0,
        "kl_penalty_type": "low_var_kl", "ratio_clip_eps": 0.2, "entropy_bonus": 0.0, "calculate_entropy": False,
        "clip_ratio_c": None, "clip_ratio_low": None, "clip_ratio_high": None, "adv_type": "grpo",
        "normalize_advantages": True, "early_stop_imp_ratio": 5.0, "use_valid_token_scale": False,
        "value_clip": 0.5, "critic_warmup_steps": 0, "gamma": 1.0, "gae_lambda": 1.0,
        **under("sampling_params", {"use_greedy": False, "do_sample": True, "temperature": 1.0, "top_k": 1000000,
                                    "top_p": 1.0, "repetition_penalty": 1.0,
                                    "max_new_tokens": "${subtract:${runner.seq_length},${data.max_prompt_length}}",
                                    "min_new_tokens": 1})}),
    **under("rollout", {
        "group_name": "RolloutGroup", "gpu_memory_utilization": 0.55, "model_dir": None, "model_arch": None,
        "model.model_path": None, "model.model_type": None, "model.precision": "bf16", "precision": "bf16",
        "enforce_eager": False, "distributed_executor_backend": "mp", "disable_log_stats": False, "detokenize": False,
        "padding": None, "eos": None, "rollout_backend": "sglang", "sglang.attention_backend": "triton",
        "sglang.decode_log_interval": 500000, "sglang.use_torch_compile": False, "sglang.torch_compile_max_bs": 128,
        "vllm.attention_backend": "FLASH_ATTN", "vllm.enable_chunked_prefill": True,
        "vllm.enable_prefix_caching": True, "vllm.enable_flash_infer_sampler": True,
        "vllm.max_num_batched_tokens": None, "vllm.torch_profiler_dir": None,
        "return_logprobs": "${not:${algorithm.recompute_logprobs}}", "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1, "validate_weight": False, "validate_save_dir": None, "print_outputs": False,
        "max_running_requests": 64, "cuda_graph_max_bs": 128}),
    **under("data", {"type": "math", "dataset_name": "boba", "max_prompt_length": 1024,
                     "filter_prompt_by_length": True, "rollout_batch_size": 512, "val_rollout_batch_size": None,
                     "num_workers": 2, "prompt_key": "prompt", "answer_key": "solutions", "apply_chat_template": False,
                     "shuffle": True, "validation_shuffle": True, "seed": 1234,
                     "train_data_paths": ["/dataset/boba/AReaL-boba-106k.jsonl"],
                     "val_data_paths": ["/dataset/boba/AReaL-boba-106k.jsonl"]}),
    **under("reward", {"group_name": "RewardGroup", "use_reward_model": False, "reward_type": "math",
                       "reward_scale": 5.0, **under("tokenizer", {k: f"${{actor.tokenizer.{k}}}" for k in _TOKENIZER})}),
    "critic.use_critic_model": False,
}

NO_DEBUG = "a debugging aid of RLinf with no native counterpart"
CRITIC = "the critic follows the actor's layout and schedule here"
NOTES: dict[str, str] = {
    "actor.model.megatron_checkpoint": "Megatron weights are converted from the HF model at start",
    "critic.model.megatron_checkpoint": "Megatron weights are converted from the HF model at start",
    "actor.model.moe_router_load_balancing_type": "the router settings come from the HF model's config.json",
    "actor.model.moe_router_topk": "the router settings come from the HF model's config.json",
    "actor.model.moe_router_pre_softmax": "the router settings come from the HF model's config.json",
    "actor.model.init_method_std": "weights load from the model; no initialisation",
    "actor.lr_sched.start_weight_decay": "weight decay is constant (optim.weight_decay)",
    "actor.lr_sched.end_weight_decay": "weight decay is constant (optim.weight_decay)",
    "actor.fsdp_config.hybrid_shard_size": "hybrid sharding is fsdp_size", "actor.megatron.ckpt_convertor":
    "Megatron weights are converted from the HF model at start; no converter settings",
    "actor.megatron.profiler": NO_DEBUG, "critic.megatron": CRITIC, "critic.tokenizer": CRITIC,
    "critic.lr_sched": CRITIC, "critic.model": CRITIC, "critic.group_name": "worker groups are named by role",
    "critic.mcore_gpt": "Megatron-Core GPT is the only Megatron model", "critic.spec_name": CRITIC,
    "critic.offload_optimizer": "colocated roles always offload their state between phases",
    "critic.offload_weight": "colocated roles always offload their state between phases",
    "critic.offload_grad": "colocated roles always offload their state between phases",
    "critic.enable_dp_load_balance": "micro-batches are split evenly", "critic.calculate_flops": NO_DEBUG,
    "critic.seed": "the critic's seed follows the pipeline seed", "critic.checkpoint_load_path": CRITIC,
    "critic.fsdp_config": CRITIC, "critic.enable_offload": CRITIC, "critic.global_batch_size": CRITIC,
    "critic.micro_batch_size": CRITIC, "inference": "a separate log-prob component is not imported; actor_train "
    "computes old log-probs", "critic.optim": CRITIC,
}
OPEN_SECTIONS: dict[str, str] = {
    "inference": "a separate log-prob component is not imported; actor_train computes old log-probs",
    "actor.megatron.profiler": NO_DEBUG, "critic.megatron.profiler": NO_DEBUG,
}
BUILTINS: dict[str, BuiltinConfig] = {
    "training_backend/fsdp": BuiltinConfig("fsdp", "actor.fsdp_config"),
    "hybrid_engines/fsdp": BuiltinConfig("fsdp", "actor.fsdp_config"),
}


def _families() -> tuple[Family, ...]:
    megatron = {**_COMMON, **_worker("actor", "megatron"), **_worker("critic", "megatron")}
    fsdp = {**_COMMON, **_worker("actor", "fsdp"), **_worker("critic", "fsdp"),
            **under("inference", {"group_name": "InferenceGroup", **under("fsdp_config", FSDP_CONFIG)})}
    return (Family("current", "2025-09 onward (examples/reasoning/config/math)", {"megatron": megatron, "fsdp": fsdp}),)


SURFACE = Surface(framework="rlinf", families=_families(), notes=NOTES, open_sections=OPEN_SECTIONS,
                  builtins=BUILTINS)
