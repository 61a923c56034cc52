"""SkyRL (skyrl-train `ppo_base_config`) -> native schema.

SkyRL counts `policy_mini_batch_size` in prompts (× `n_samples_per_prompt` samples) and
`micro_train_batch_size_per_gpu` in samples: gradient_accumulation_steps = mini × n / (micro × dp).
`trainer.placement` becomes device_mapping: with `colocate_all` every role shares the policy's
devices; otherwise policy, reference (unless colocate_policy_ref), critic and the inference engines
get consecutive blocks of devices. Releases from 2026 keep the engine settings under
`generator.inference_engine` (`num_engines`, `tensor_parallel_size`, …): both spellings are read.
The KL estimator is `kl_estimator_type` (v0.1 on), or the older `use_kl_estimator_k3` / `use_abs_kl`
when those are set. `generator.max_turns` above 1 (multi-turn environments) is refused. SkyRL's
datasets hold each prompt as a chat in the column `prompt`: data_args.messages is `prompt`. The truncated
importance sampling of the rollout-training mismatch (`use_tis`, v0.4's `off_policy_correction`) becomes
train_infer_correction, and a LoRA (`lora.rank` > 0, not Megatron) is served by vLLM with enable_lora, as in SkyRL.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from trainer.config.importers.common import (
    MISMATCH,
    drop_unused_reference,
    enable_vllm_lora,
    fill_model_paths,
    fit_to_model,
    import_lora,
    import_save_interval,
    mismatch_filter,
    mismatch_weight,
    positive_interval,
    positive_number,
    settle_strategies,
    warn_unused,
)
from trainer.config.importers.rules import Rule, Translation, choice, devices, to_dtype
from trainer.config.schema import DeepSpeedConfig
from trainer.config.topology import gradient_accumulation

NAME = "skyrl"
SIGNATURE = ("trainer", "generator", "data")
REQUIRED = ("trainer", "generator")

T = "trainer"
G = "generator"
ALG = f"{T}.algorithm"
PL = f"{T}.placement"
STRATEGY = choice({"fsdp": "fsdp2_train", "fsdp2": "fsdp2_train", "deepspeed": "deepspeed_train",
                   "megatron": "megatron_train"}, "strategy")
FORWARD = {"fsdp2_train": "fsdp2_infer", "deepspeed_train": "deepspeed_infer", "megatron_train": "megatron_infer"}
KL_TYPE = choice({"k1": "kl", "k2": "mse", "k3": "low_var_kl", "abs": "abs"}, "kl_estimator_type")
POLICY_LOSS = {"regular": ("ppo", False), "dual_clip": ("ppo", True), "gspo": ("gspo", False)}
LOSS_REDUCTION = choice({"token_mean": "token-mean", "sequence_mean": "seq-mean-token-mean",
                         "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}, "loss_reduction")
SCHEDULER = choice({"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine",
                    "cosine_with_warmup": "cosine", "cosine_with_min_lr": "cosine", "linear": "linear",
                    "linear_with_warmup": "linear"}, "scheduler")
KL_CTRL = choice({"fixed": "fixed", "adaptive": "adaptive"}, "kl_ctrl type")
# Engine settings: older releases write them flat under generator, 2026 under generator.inference_engine.
ENGINE_KEYS = {"model_dtype": "model_dtype", "run_engines_locally": "run_engines_locally",
               "num_inference_engines": "num_engines", "backend": "backend", "weight_sync_backend": "weight_sync_backend",
               "inference_engine_tensor_parallel_size": "tensor_parallel_size", "async_engine": "async_engine",
               "vllm_v1_disable_multiproc": "vllm_v1_disable_multiproc", "enable_prefix_caching": "enable_prefix_caching",
               "enable_chunked_prefill": "enable_chunked_prefill", "max_num_batched_tokens": "max_num_batched_tokens",
               "enforce_eager": "enforce_eager", "gpu_memory_utilization": "gpu_memory_utilization",
               "max_num_seqs": "max_num_seqs", "remote_inference_engine_urls": "remote_urls",
               "override_existing_update_group": "override_existing_update_group",
               "inference_engine_pipeline_parallel_size": "pipeline_parallel_size"}
MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size", "expert_tensor_parallel_size")
ADV = choice({"grpo": "grpo", "gae": "gae", "rloo": "rloo", "reinforce++": "reinforce_plus_plus",
              "reinforce_plus_plus": "reinforce_plus_plus"}, "advantage_estimator")
LOSS_TYPE = choice({"regular": False, "dual_clip": True}, "ppo_loss_type")
ENGINE = choice({"vllm": "vllm", "sglang": "sglang"}, "backend")
RESUME = ("none", "latest", "from_path")
NO_DEBUG = "a debugging aid of SkyRL with no native counterpart"
OPC = f"{ALG}.off_policy_correction"
SEQUENCE_MASKS = {"geometric": ("geometric", "geo_mask_low", "geo_mask_high", 0.99, 1.01),
                  "product": ("sequence", "product_mask_low", "product_mask_high", 0.5, 2.0)}


def _logger(value: Any) -> str:
    table = {"wandb": "wandb", "console": "stdout", "tensorboard": "tensorboard", "swanlab": "swanlab"}
    names = [value] if isinstance(value, str) else list(value)
    for name in names:
        if name in table and table[name] != "stdout":
            return table[name]
    if "console" in names:
        return "stdout"
    raise ValueError(f"logger {value!r}: expected wandb or console")


def _batched(value: bool) -> int:
    return 0 if value else 1  # batched: the whole batch in one generate call (generate_opt_level 0)


def _lora_rank(value: int) -> int | None:
    return value if value > 0 else None  # SkyRL: rank 0 trains all weights


def engine_path(t: Translation, legacy: str) -> str:
    """Where the file sets an engine setting: generator.inference_engine.<new name> (2026) or generator.<legacy>."""
    nested = f"{G}.inference_engine.{ENGINE_KEYS[legacy]}"
    return nested if t.has(nested) else f"{G}.{legacy}"


def _model_rules(src: str, role: str) -> list[Rule]:
    ta = f"{role}.training_args"
    cfg = f"{role}.strategy_args.strategy_config"
    rules = [
        Rule(f"{src}.deepspeed_config", cfg, {"zero_optimization": {"stage": 2}}, derived=True,
             note="used when trainer.strategy is deepspeed; keys unknown to DeepSpeedConfig are reported"),
        Rule(f"{src}.fsdp_config.cpu_offload", f"{cfg}.cpu_offload", True, note="used with fsdp/fsdp2"),
        Rule(f"{src}.fsdp_config.reshard_after_forward", f"{cfg}.reshard_after_forward", False,
             note="used with fsdp/fsdp2"),
        Rule(f"{src}.fsdp_config.fsdp_size", f"{cfg}.fsdp_size", 2, note="used with fsdp/fsdp2"),
        Rule(f"{src}.sequence_parallel_size", f"{cfg}.ulysses_sequence_parallel_size", 2,
             note="Ulysses sequence parallelism; the data-parallel size becomes GPUs / this"),
    ]
    if role != "reference":
        rules += [
            Rule(f"{src}.optimizer_config.lr", f"{ta}.learning_rate", 3e-6),
            Rule(f"{src}.optimizer_config.adam_betas", f"{ta}.adam_beta1", [0.8, 0.95], derived=True,
                 note="[beta1, beta2] → adam_beta1, adam_beta2"),
            Rule(f"{src}.optimizer_config.weight_decay", f"{ta}.weight_decay", 0.03),
            Rule(f"{src}.optimizer_config.max_grad_norm", f"{ta}.max_grad_norm", 0.7),
            Rule(f"{src}.optimizer_config.offload_after_step", None, False, implied=True,
                 note="colocated roles always offload their optimizer state between phases"),
            Rule(f"{src}.optimizer_config.num_warmup_steps", f"{ta}.warmup_steps", 7),
            Rule(f"{src}.optimizer_config.scheduler", f"{ta}.lr_scheduler_type", "cosine", SCHEDULER,
                 "constant(_with_warmup) → constant, cosine(_with_warmup, _with_min_lr) → cosine, linear → linear"),
            Rule(f"{src}.model.path", "pretrain" if role == "actor_train" else f"{role}.model_args.model_name_or_path",
                 "/models/m", note="the policy model also loads into actor_infer and reference"
                 if role == "actor_train" else "a critic is created when this is set"),
        ]
    if role == "actor_train":
        rules += [
            Rule(f"{src}.use_torch_compile", None, True, implied=False, note="entropy is computed eagerly"),
            Rule(f"{src}.record_memory", None, True, implied=False, note=NO_DEBUG),
            Rule(f"{src}.model.lora.rank", f"{role}.model_args.lora_rank", 16, _lora_rank,
                 "0 trains all weights; > 0 (not Megatron) also makes a vllm engine serve the adapter "
                 "(actor_infer's enable_lora), as SkyRL starts vLLM with enable_lora and syncs the adapter only"),
            Rule(f"{src}.model.lora.alpha", f"{role}.model_args.lora_alpha", 32, derived=True,
                 note="used when lora.rank > 0"),
            Rule(f"{src}.model.lora.target_modules", f"{role}.model_args.lora_target", "q_proj,v_proj", derived=True,
                 note="used when lora.rank > 0"),
            Rule(f"{src}.model.lora.dropout", f"{role}.model_args.lora_dropout", 0.05, derived=True,
                 note="used when lora.rank > 0"),
            *[Rule(f"{src}.megatron_config.{key}", f"{cfg}.{key}", 2, note="used when trainer.strategy is megatron; "
                   "also the reference's") for key in MEGATRON_SIZES],
            Rule(f"{src}.megatron_config.ddp_config.overlap_grad_reduce", f"{cfg}.overlap_grad_reduce", True,
                 note="used when trainer.strategy is megatron"),
            Rule(f"{src}.megatron_config.ddp_config.overlap_param_gather", f"{cfg}.overlap_param_gather", True,
                 note="used when trainer.strategy is megatron"),
        ]
    if role == "reference":
        rules.append(Rule(f"{src}.model.path", f"{role}.model_args.model_name_or_path", "/models/ref",
                          note="unset: the policy model"))
    return rules


RULES: list[Rule] = [
    Rule("data.train_data", "actor_train.data_args.file_name", ["/data/train.parquet"]),
    Rule("data.val_data", "validation.data_args.file_name", ["/data/val.parquet"],
         note="also creates the validation section"),
    # placement
    Rule(f"{PL}.colocate_all", "colocate_all", False, note="also decides every role's device_mapping"),
    Rule(f"{PL}.colocate_policy_ref", "reference.device_mapping", False, derived=True,
         note="true: reference on the policy's devices; false: its own block"),
    Rule(f"{PL}.colocate_critic_reward", None, True, implied=False,
         note="SkyRL rewards come from the environment; there is no reward model to place"),
    Rule(f"{PL}.policy_num_nodes", "actor_train.device_mapping", 2, derived=True,
         note="policy devices = nodes × GPUs per node"),
    Rule(f"{PL}.policy_num_gpus_per_node", "actor_train.device_mapping", 2, derived=True,
         note="also num_gpus_per_node (the largest per-node count)"),
    Rule(f"{PL}.critic_num_nodes", "critic.device_mapping", 2, derived=True, note="used when there is a critic"),
    Rule(f"{PL}.critic_num_gpus_per_node", "critic.device_mapping", 2, derived=True,
         note="used when there is a critic"),
    Rule(f"{PL}.ref_num_nodes", "reference.device_mapping", 2, derived=True,
         note="used when not colocated with the policy"),
    Rule(f"{PL}.ref_num_gpus_per_node", "reference.device_mapping", 2, derived=True,
         note="used when not colocated with the policy"),
    Rule(f"{PL}.reward_num_nodes", None, 2, implied=1,
         note="SkyRL rewards come from the environment; there is no reward model to place"),
    Rule(f"{PL}.reward_num_gpus_per_node", None, 2, implied=4,
         note="SkyRL rewards come from the environment; there is no reward model to place"),
    # general training
    Rule(f"{T}.epochs", "max_steps", 3, derived=True, note="epochs need the dataset size: reported, set max_steps"),
    Rule(f"{T}.update_epochs_per_batch", "ppo_epochs", 2),
    Rule(f"{T}.train_batch_size", "rollout_batch_size", 64),
    Rule(f"{T}.policy_mini_batch_size", "actor_train.training_args.gradient_accumulation_steps", 16, derived=True,
         note="prompts per optimizer step: accumulation = mini × n / (micro × dp)"),
    Rule(f"{T}.critic_mini_batch_size", "critic.training_args.gradient_accumulation_steps", 16, derived=True,
         note="as for the policy, with the critic's dp"),
    Rule(f"{T}.micro_train_batch_size_per_gpu", "actor_train.training_args.per_device_train_batch_size", 4,
         derived=True, note="also the critic's"),
    Rule(f"{T}.micro_forward_batch_size_per_gpu", "actor_train.infer_batch_size", 2, derived=True,
         note="infer_batch_size of actor_train, reference and critic"),
    Rule(f"{T}.update_ref_every_epoch", None, True, implied=False, note="the reference stays the initial policy"),
    Rule(f"{T}.num_warmup_steps", "actor_train.training_args.warmup_steps", 7, derived=True, note="also the critic's"),
    Rule(f"{T}.use_sample_packing", None, True, implied=False,
         note="sample packing is not implemented; batches are padded"),
    Rule(f"{T}.max_prompt_length", "prompt_length", 333),
    Rule(f"{T}.gradient_checkpointing", "actor_train.model_args.disable_gradient_checkpointing", False,
         derived=True, note="inverted; also the critic's"),
    Rule(f"{T}.seed", "seed", 7),
    Rule(f"{T}.strategy", "actor_train.strategy_args.strategy_name", "deepspeed", derived=True,
         note="fsdp/fsdp2 → fsdp2_train, deepspeed → deepspeed_train (critic too; reference: *_infer)"),
    # evaluation
    Rule(f"{T}.eval_batch_size", "val_batch_size", 96),
    Rule(f"{T}.eval_before_train", "val_before_train", False),
    Rule(f"{T}.eval_interval", "eval_steps", 3, positive_interval, "-1 disables evaluation"),
    # checkpoints and logging
    Rule(f"{T}.resume_mode", "resume_from_checkpoint", "none", derived=True,
         note="none → false, latest → true, from_path → resume_path"),
    Rule(f"{T}.resume_path", "resume_from_checkpoint", "/ckpt/global_step_10", derived=True,
         note="used when resume_mode is from_path"),
    Rule(f"{T}.ckpt_path", "checkpoint_config.output_dir", "/ckpt"),
    Rule(f"{T}.max_ckpts_to_keep", "max_ckpts_to_keep", 2),
    Rule(f"{T}.ckpt_interval", "save_steps", 4, derived=True, note="-1 (never) keeps only the final checkpoint"),
    Rule(f"{T}.hf_save_interval", None, 5, implied=-1, note="checkpoints are written every save_steps only"),
    Rule(f"{T}.export_path", None, "/exports", note="exports and dumps are not written; events.jsonl holds "
         "metrics and rollouts"),
    Rule(f"{T}.project_name", "tracker_kwargs.project", "my_project"),
    Rule(f"{T}.run_name", "exp_name", "my_run"),
    Rule(f"{T}.logger", "track_with", "console", _logger, "console → stdout"),
    Rule(f"{T}.dump_data_batch", None, True, implied=False, note=NO_DEBUG),
    Rule(f"{T}.dump_eval_results", None, False, implied=True,
         note="evaluation samples are recorded as rollouts events instead"),
    # models
    *_model_rules(f"{T}.policy", "actor_train"),
    *_model_rules(f"{T}.critic", "critic"),
    *_model_rules(f"{T}.ref", "reference"),
    Rule("deepspeed_config", None, {"train": {"zero_optimization": {"stage": 1}}}, derived=True,
         note="templates that trainer.*.deepspeed_config reference; their values arrive through them"),
    # algorithm
    Rule(f"{ALG}.advantage_estimator", "adv_estimator", "gae", ADV),
    Rule(f"{ALG}.kl_estimator_type", "kl_penalty", "k2", derived=True,
         note="k1 → kl, k2 → mse, k3 → low_var_kl, abs → abs; the older use_kl_estimator_k3 / use_abs_kl win when true"),
    Rule(f"{ALG}.use_kl_estimator_k3", "kl_penalty", False, derived=True,
         note="true → low_var_kl; else use_abs_kl true → abs; else kl_estimator_type (before v0.1: kl)"),
    Rule(f"{ALG}.use_abs_kl", "kl_penalty", True, derived=True, note="see use_kl_estimator_k3"),
    Rule(f"{ALG}.kl_ctrl.type", "kl_ctrl_type", "adaptive", KL_CTRL, "the controller of KL in the reward"),
    Rule(f"{ALG}.kl_ctrl.kl_target", "target_kl", 0.05, derived=True, note="used when kl_ctrl.type is adaptive"),
    Rule(f"{ALG}.kl_ctrl.horizon", "kl_horizon", 5000),
    Rule(f"{ALG}.policy_loss_type", "policy_loss", "gspo", derived=True,
         note="regular → ppo, dual_clip → ppo with dual_clip_loss, gspo → gspo; other losses are refused"),
    Rule(f"{ALG}.loss_reduction", "loss_agg_mode", "sequence_mean", LOSS_REDUCTION),
    Rule(f"{ALG}.grpo_norm_by_std", "norm_adv_by_std_in_grpo", False),
    Rule(f"{ALG}.use_entropy_loss", "entropy_loss_coef", True, derived=True,
         note="entropy_loss_coef = entropy_loss_coef when true, else 0"),
    Rule(f"{ALG}.entropy_loss_coef", "entropy_loss_coef", 0.02, derived=True, note="used when use_entropy_loss"),
    Rule(f"{ALG}.use_kl_in_reward", "add_token_level_kl", True, derived=True,
         note="KL in the reward with coefficient kl_loss_coef (init_kl_coef); exclusive with use_kl_loss"),
    Rule(f"{ALG}.use_kl_loss", "use_kl_loss", False),
    Rule(f"{ALG}.kl_loss_coef", "kl_loss_coef", 0.003, note="also init_kl_coef when use_kl_in_reward"),
    Rule(f"{ALG}.advantage_batch_normalize", "whiten_advantages", True),
    Rule(f"{ALG}.value_head_prefix", None, "score", implied="value_head",
         note="the value head is created and named by the trainer"),
    Rule(f"{ALG}.ppo_loss_type", "dual_clip_loss", "dual_clip", LOSS_TYPE, "dual_clip → true, regular → false"),
    Rule(f"{ALG}.lambd", "lambd", 0.9),
    Rule(f"{ALG}.gamma", "gamma", 0.99),
    Rule(f"{ALG}.eps_clip_low", "pg_clip_low", 0.18),
    Rule(f"{ALG}.eps_clip_high", "pg_clip_high", 0.28),
    Rule(f"{ALG}.clip_ratio_c", "clip_ratio_c", 4.0),
    Rule(f"{ALG}.value_clip", "value_clip", 0.4),
    Rule(f"{ALG}.normalize_reward", None, True, implied=False,
         note="the critic's outputs are not normalised by running statistics"),
    # importance correction of the rollout-training mismatch (pi_old / pi_rollout) as train_infer_correction
    Rule(f"{ALG}.use_tis", f"{MISMATCH}.is_weight", True, derived=True,
         note="true → is_weight at token level, upper_bound = tis_imp_ratio_cap: SkyRL's loss times "
         "min(pi_old / pi_rollout, cap)"),
    Rule(f"{ALG}.tis_imp_ratio_cap", f"{MISMATCH}.is_weight.upper_bound", 2.5, derived=True,
         note="used with use_tis; must be > 0 then"),
    Rule(f"{OPC}.tis_ratio_type", f"{MISMATCH}.is_weight", "sequence", derived=True,
         note="token / sequence → is_weight {weight_type, upper_bound = token_ / sequence_tis_ratio_clip_high}; "
         "null: none"),
    Rule(f"{OPC}.token_tis_ratio_clip_high", f"{MISMATCH}.is_weight.upper_bound", 3.0, derived=True,
         note="used when tis_ratio_type is token"),
    Rule(f"{OPC}.sequence_tis_ratio_clip_high", f"{MISMATCH}.is_weight.upper_bound", 8.0, derived=True,
         note="used when tis_ratio_type is sequence"),
    Rule(f"{OPC}.sequence_mask_metric", f"{MISMATCH}.filters", "product", derived=True,
         note="geometric → a filter at geometric level with band [geo_mask_low, geo_mask_high]; product → at "
         "sequence level with band [product_mask_low, product_mask_high]: samples outside leave the loss"),
    *[Rule(f"{OPC}.{key}", f"{MISMATCH}.filters", example, derived=True,
           note=f"a band bound, used when sequence_mask_metric is {metric}")
      for key, example, metric in (("geo_mask_low", 0.98, "geometric"), ("geo_mask_high", 1.02, "geometric"),
                                   ("product_mask_low", 0.4, "product"), ("product_mask_high", 2.5, "product"))],
    Rule(f"{OPC}.token_mask_is_threshold_low", f"{MISMATCH}.filters", 0.25, derived=True,
         note="with token_mask_is_threshold_high: a token-level filter with that band (tokens outside leave the loss)"),
    Rule(f"{OPC}.token_mask_is_threshold_high", f"{MISMATCH}.filters", 4.0, derived=True,
         note="see token_mask_is_threshold_low"),
    *[Rule(f"{OPC}.outlier_token_is_threshold_{side}", None, example,
           note="a veto of whole sequences for any token ratio outside the bounds is not built (the native filters "
           "read a token's ratio or a sequence's aggregate)") for side, example in (("low", 1e-4), ("high", 100.0))],
    # generator
    Rule(f"{G}.model_dtype", "actor_infer.model_args.dtype", "float16", to_dtype),
    Rule(f"{G}.run_engines_locally", None, False, implied=True,
         note="engines always run inside the cluster; remote engines are not supported"),
    Rule(f"{G}.num_inference_engines", "actor_infer.device_mapping", 2, derived=True,
         note="engine devices = num_inference_engines × inference_engine_tensor_parallel_size"),
    Rule(f"{G}.backend", "actor_infer.strategy_args.strategy_name", "sglang", ENGINE),
    Rule(f"{G}.weight_sync_backend", None, "gloo", implied="nccl",
         note="weights are synced by the trainer (NCCL on GPU, gloo on CPU)"),
    Rule(f"{G}.inference_engine_tensor_parallel_size",
         "actor_infer.strategy_args.strategy_config.tensor_parallel_size", 2),
    Rule(f"{G}.n_samples_per_prompt", "num_return_sequences_in_group", 6),
    Rule(f"{G}.async_engine", None, False, implied=True, note="the engine always runs asynchronously"),
    Rule(f"{G}.batched", "generate_opt_level", True, _batched,
         "true → 0 (whole batch at once), false → 1 (requests streamed through a scheduler)"),
    Rule(f"{G}.max_input_length", "prompt_length", 777, derived=True,
         note="multi-turn input limit; must equal trainer.max_prompt_length for single-turn RLVR"),
    Rule(f"{G}.enable_prefix_caching", "actor_infer.strategy_args.strategy_config.enable_prefix_caching", False),
    Rule(f"{G}.enable_chunked_prefill", "actor_infer.strategy_args.strategy_config.enable_chunked_prefill", False),
    Rule(f"{G}.max_num_batched_tokens", "actor_infer.strategy_args.strategy_config.max_num_batched_tokens", 4096),
    Rule(f"{G}.enforce_eager", "actor_infer.strategy_args.strategy_config.enforce_eager", True),
    Rule(f"{G}.gpu_memory_utilization", "actor_infer.strategy_args.strategy_config.gpu_memory_utilization", 0.45),
    Rule(f"{G}.max_num_seqs", "actor_infer.strategy_args.strategy_config.max_num_seqs", 256),
    Rule(f"{G}.vllm_v1_disable_multiproc", None, True, implied=False, note="engine processes are managed by vLLM"),
    Rule(f"{G}.remote_inference_engine_urls", None, ["10.0.0.1:8001"], derived=True,
         note="used only when run_engines_locally is false (not supported)"),
    Rule(f"{G}.max_turns", None, 3, derived=True,
         note="above 1 is refused: SkyRL's multi-turn environments are not supported here"),
    Rule(f"{G}.override_existing_update_group", None, "enable", implied="auto",
         note="applies to remote engines only"),
    Rule(f"{G}.sampling_params.max_generate_length", "response_length", 555,
         note="also actor_infer.generating_args.max_new_tokens (unset means response_length)"),
    Rule(f"{G}.sampling_params.temperature", "actor_infer.generating_args.temperature", 0.7),
    Rule(f"{G}.sampling_params.top_p", "actor_infer.generating_args.top_p", 0.9),
    Rule(f"{G}.sampling_params.min_p", "actor_infer.generating_args.min_p", 0.05),
    Rule(f"{G}.sampling_params.top_k", "actor_infer.generating_args.top_k", 40),
    Rule(f"{G}.sampling_params.stop", "actor_infer.generating_args.stop_strings", ["</answer>"]),
    Rule(f"{G}.sampling_params.repetition_penalty", "actor_infer.generating_args.repetition_penalty", 1.1),
    Rule(f"{T}.flash_attn", None, False, implied=True,
         note="the attention kernel is model_args.attn_implementation (unset: the model's default)"),
    Rule(f"{T}.bf16", None, False, implied=True, note="precision follows model_args.dtype and the strategy's "
         "mixed precision"),
    Rule(f"{G}.use_conversation_multi_turn", None, True, implied=False,
         note="multi-turn generation is not part of the RLVR pipeline"),
    Rule(f"{G}.eval_sampling_params.max_generate_length", "validation.generating_args.max_new_tokens", 555),
    Rule(f"{G}.eval_sampling_params.temperature", "validation.generating_args.temperature", 0.6),
    Rule(f"{G}.eval_sampling_params.top_p", "validation.generating_args.top_p", 0.95),
    Rule(f"{G}.eval_sampling_params.min_p", "validation.generating_args.min_p", 0.05),
    Rule(f"{G}.eval_sampling_params.top_k", "validation.generating_args.top_k", 40),
    Rule(f"{G}.eval_n_samples_per_prompt", "val_n_sample", 4),
    Rule(f"{G}.zero_reward_on_non_stop", None, True, implied=False,
         note="truncated responses are scored like any other"),
    Rule("environment.env_class", None, "sql", implied="gsm8k",
         note="rewards are built-in functions (rewards.*.reward_type); gsm8k is imported as math_rule"),
]

RULES += [dataclasses.replace(rule, source=f"{G}.inference_engine.{ENGINE_KEYS[rule.source.rpartition('.')[2]]}")
          for rule in RULES if rule.source.startswith(f"{G}.") and rule.source.rpartition(".")[2] in ENGINE_KEYS]

# SkyRL's own defaults (ppo_base_config) where the native default means something else.
DEFAULTS: dict[str, Any] = {
    T: {
        "placement": {"colocate_all": True, "colocate_policy_ref": True, "policy_num_nodes": 1,
                      "policy_num_gpus_per_node": 4, "critic_num_nodes": 1, "critic_num_gpus_per_node": 4,
                      "ref_num_nodes": 1, "ref_num_gpus_per_node": 4},
        "strategy": "fsdp2", "train_batch_size": 1024, "policy_mini_batch_size": 256, "critic_mini_batch_size": 256,
        "micro_train_batch_size_per_gpu": 1, "micro_forward_batch_size_per_gpu": 1, "update_epochs_per_batch": 1,
        "max_prompt_length": 512, "gradient_checkpointing": True, "seed": 42, "eval_interval": 5,
        "ckpt_interval": 10, "logger": "wandb",
        "algorithm": {"advantage_estimator": "grpo", "use_kl_in_reward": False, "use_kl_loss": True,
                      "kl_loss_coef": 0.001, "advantage_batch_normalize": False, "lambd": 1.0, "gamma": 1.0,
                      "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0},
        "policy": {"optimizer_config": {"lr": 1e-6, "adam_betas": [0.9, 0.999], "weight_decay": 1e-2,
                                        "max_grad_norm": 1.0}},
    },
    G: {"n_samples_per_prompt": 5,
        "sampling_params": {"max_generate_length": 1024, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0,
                            "top_k": -1}},
}
# SkyRL's engine defaults (flat or under generator.inference_engine, whichever the file uses).
ENGINE_DEFAULTS = {"backend": "vllm", "num_inference_engines": 1, "inference_engine_tensor_parallel_size": 4,
                   "run_engines_locally": True}


def finish(t: Translation) -> None:
    if t.int(f"{G}.max_turns", 1) > 1:
        t.error(f"{G}.max_turns", f"{t.get(f'{G}.max_turns')} is refused: SkyRL's multi-turn environments are not "
                "supported (the agentic pipeline plays ROLL environments: train_env_manager, custom_envs), and running "
                "single-turn would train something else; set 1 "
                "for a single-turn task")
    _kl(t)
    _losses(t)
    has_critic = t.has(f"{T}.critic.model.path")
    if not has_critic:
        t.native.pop("critic", None)
        why = "no critic is created (trainer.critic.model.path is unset)"
        for prefix in (f"{T}.critic", f"{T}.critic_mini_batch_size", f"{PL}.critic_num_nodes",
                       f"{PL}.critic_num_gpus_per_node"):
            warn_unused(t, prefix, why)
        if t.get(f"{ALG}.advantage_estimator") == "gae":
            t.error(f"{T}.critic.model.path", "advantage_estimator gae needs a critic model; set its path")
    if not has_critic and not t.written(f"{ALG}.value_clip"):
        t.native.pop("value_clip", None)  # SkyRL's default value clip; without a critic nothing uses it
    _strategies(t, has_critic)
    _placement(t, has_critic)
    _batches(t, has_critic)
    _schedule(t)
    _generation(t)
    t.native["rewards"] = {"math": {"reward_type": "math_rule"}}
    if t.written("deepspeed_config") and t.get(f"{T}.strategy") != "deepspeed":
        warn_unused(t, "deepspeed_config", "DeepSpeed templates are used only when trainer.strategy is deepspeed")
    import_lora(t, f"{T}.policy.model", rank="lora.rank", alpha="lora.alpha", targets="lora.target_modules",
                dropout="lora.dropout")
    enable_vllm_lora(t, f"{T}.policy.model.lora.rank", megatron=t.get(f"{T}.strategy") == "megatron")
    _off_policy_correction(t)
    if t.has("data.val_data"):
        val = t.native.setdefault("validation", {})
        val.setdefault("generating_args", {})
    # SkyRL's datasets hold each prompt as a chat in column "prompt", and the answer its environments
    # check in reward_spec.ground_truth
    for role in ("actor_train", "validation"):
        if role in t.native:
            data = t.native[role].setdefault("data_args", {})
            data.setdefault("messages", "prompt")
            data.setdefault("response", "reward_spec.ground_truth")
    fill_model_paths(t, ("actor_train", "actor_infer", "reference"))
    drop_unused_reference(t)
    settle_strategies(t)


def _kl(t: Translation) -> None:
    in_reward, loss = bool(t.get(f"{ALG}.use_kl_in_reward")), bool(t.get(f"{ALG}.use_kl_loss"))
    if in_reward and loss:
        t.error(f"{ALG}.use_kl_in_reward", "SkyRL refuses use_kl_in_reward together with use_kl_loss; "
                "set one of them to false")
    t.native["add_token_level_kl"] = in_reward
    t.origin.setdefault("add_token_level_kl", f"{ALG}.use_kl_in_reward")
    if in_reward:
        t.set("init_kl_coef", t.get(f"{ALG}.kl_loss_coef", 0.001), f"{ALG}.kl_loss_coef")
    if in_reward and t.get(f"{ALG}.kl_ctrl.type") == "adaptive" and t.has(f"{ALG}.kl_ctrl.kl_target"):
        t.set("target_kl", t.float(f"{ALG}.kl_ctrl.kl_target"), f"{ALG}.kl_ctrl.kl_target")
    elif t.written(f"{ALG}.kl_ctrl.kl_target"):
        t.warn(f"{ALG}.kl_ctrl.kl_target", "not imported: used only by an adaptive controller of KL in the reward "
               "(use_kl_in_reward with kl_ctrl.type adaptive)")
    if t.get(f"{ALG}.use_kl_estimator_k3"):
        estimator = "low_var_kl"
        if t.get(f"{ALG}.use_abs_kl"):
            t.warn(f"{ALG}.use_abs_kl", "= True not imported: use_kl_estimator_k3 takes precedence, as in SkyRL")
    elif t.get(f"{ALG}.use_abs_kl"):
        estimator = "abs"
    elif t.has(f"{ALG}.kl_estimator_type"):
        try:
            estimator = KL_TYPE(t.get(f"{ALG}.kl_estimator_type"))
        except ValueError as exc:
            t.error(f"{ALG}.kl_estimator_type", str(exc))
            return
    elif t.has(f"{ALG}.use_kl_estimator_k3"):
        estimator = "kl"  # before v0.1: use_kl_estimator_k3 false and use_abs_kl false meant k1
    else:
        estimator = "low_var_kl"  # SkyRL's default (k3) in every release
    t.native["kl_penalty"] = estimator


def _losses(t: Translation) -> None:
    """policy_loss_type (v0.1 on) and the entropy bonus; the older ppo_loss_type is a rule of its own."""
    kind = t.get(f"{ALG}.policy_loss_type")
    if kind is not None:
        if kind not in POLICY_LOSS:
            t.error(f"{ALG}.policy_loss_type", f"{kind!r} is not built; valid here: {', '.join(POLICY_LOSS)}")
        else:
            loss, dual = POLICY_LOSS[kind]
            t.set("policy_loss", loss, f"{ALG}.policy_loss_type")
            t.set("dual_clip_loss", dual, f"{ALG}.policy_loss_type")
    if t.get(f"{ALG}.use_entropy_loss"):
        t.set("entropy_loss_coef", t.float(f"{ALG}.entropy_loss_coef", 0.01), f"{ALG}.entropy_loss_coef")
    elif t.written(f"{ALG}.entropy_loss_coef"):
        t.warn(f"{ALG}.entropy_loss_coef", "not imported: use_entropy_loss is false")


def _strategies(t: Translation, has_critic: bool) -> None:
    try:
        train = STRATEGY(t.get(f"{T}.strategy", "fsdp2"))
    except ValueError as exc:
        t.error(f"{T}.strategy", str(exc))
        return
    if t.get(f"{T}.strategy") == "fsdp":
        t.warn(f"{T}.strategy", "fsdp (FSDP1) runs as FSDP2 (fsdp2_train) here")
    pairs = [("actor_train", "policy", train), ("reference", "ref", FORWARD[train])]
    if has_critic:
        pairs.append(("critic", "critic", train))
    for role, src, name in pairs:
        section = t.native.setdefault(role, {})
        args = section.setdefault("strategy_args", {})
        args["strategy_name"] = name
        cfg = args.setdefault("strategy_config", {})
        ds_path = f"{T}.{src}.deepspeed_config"
        if role == "reference" and train == "megatron_train":
            policy = t.native["actor_train"]["strategy_args"].get("strategy_config", {})
            cfg.update({k: v for k, v in policy.items() if k in MEGATRON_SIZES})
        if train == "deepspeed_train":
            cfg.update(fit_to_model(t, t.get(ds_path, {}), DeepSpeedConfig, ds_path))
        elif t.written(ds_path):
            warn_unused(t, ds_path, f"used only when trainer.strategy is deepspeed (it is {t.get(f'{T}.strategy')})")
    for role, src in (("actor_train", "policy"), ("critic", "critic")):
        if role == "critic" and not has_critic:
            continue
        ta = t.native.setdefault(role, {}).setdefault("training_args", {})
        betas = t.get(f"{T}.{src}.optimizer_config.adam_betas")
        if betas is not None:
            if not (isinstance(betas, list | tuple) and len(betas) == 2):
                t.error(f"{T}.{src}.optimizer_config.adam_betas", f"{betas!r} must be a list of two numbers")
            else:
                ta["adam_beta1"], ta["adam_beta2"] = float(betas[0]), float(betas[1])
        if t.has(f"{T}.num_warmup_steps"):
            ta["warmup_steps"] = t.int(f"{T}.num_warmup_steps")
        if t.has(f"{T}.micro_train_batch_size_per_gpu"):
            ta["per_device_train_batch_size"] = t.int(f"{T}.micro_train_batch_size_per_gpu")
        if t.has(f"{T}.gradient_checkpointing"):
            section = t.native[role].setdefault("model_args", {})
            section["disable_gradient_checkpointing"] = not t.get(f"{T}.gradient_checkpointing")
    for role in ("actor_train", "reference", "critic"):
        if role in t.native and t.has(f"{T}.micro_forward_batch_size_per_gpu"):
            t.native[role]["infer_batch_size"] = t.int(f"{T}.micro_forward_batch_size_per_gpu")


def _block(t: Translation, role: str) -> tuple[int, int]:
    return t.int(f"{PL}.{role}_num_nodes", 1), t.int(f"{PL}.{role}_num_gpus_per_node", 1)


def _placement(t: Translation, has_critic: bool) -> None:
    tp_path, engines_path = engine_path(t, "inference_engine_tensor_parallel_size"), engine_path(t, "num_inference_engines")
    tp = t.int(tp_path, ENGINE_DEFAULTS["inference_engine_tensor_parallel_size"])
    engines = t.int(engines_path, ENGINE_DEFAULTS["num_inference_engines"])
    t.native.setdefault("actor_infer", {}).setdefault("strategy_args", {}).setdefault(
        "strategy_name", ENGINE_DEFAULTS["backend"])
    if not t.has(tp_path):
        t.set("actor_infer.strategy_args.strategy_config.tensor_parallel_size", tp, tp_path)
    nodes, per_node = _block(t, "policy")
    policy = nodes * per_node
    engine_devices = engines * tp
    widest = max(per_node, tp)
    local = engine_path(t, "run_engines_locally")
    if not t.get(local, True):
        t.error(local, "false (remote inference engines) is not supported; engines run inside the cluster")
        return
    colocated_ref = t.get(f"{PL}.colocate_all") or t.get(f"{PL}.colocate_policy_ref")
    if t.get(f"{PL}.colocate_all") and t.written(f"{PL}.colocate_policy_ref"):
        warn_unused(t, f"{PL}.colocate_policy_ref", "implied by colocate_all")
    if colocated_ref:
        for key in ("ref_num_nodes", "ref_num_gpus_per_node"):
            warn_unused(t, f"{PL}.{key}", "unused: the reference shares the policy's devices (colocated)")
    if t.get(f"{PL}.colocate_all"):
        if has_critic:
            for key in ("critic_num_nodes", "critic_num_gpus_per_node"):
                warn_unused(t, f"{PL}.{key}", "unused: colocate_all puts the critic on the policy's devices")
        if engine_devices != policy:
            t.error(engines_path, f"with colocate_all, {engines_path.rpartition('.')[2]} × "
                    f"{tp_path.rpartition('.')[2]} = {engines} × {tp} = {engine_devices} must equal the "
                    f"policy's policy_num_nodes × policy_num_gpus_per_node = {policy}")
        layout = {"actor_train": devices(0, policy), "actor_infer": devices(0, policy),
                  "reference": devices(0, policy)}
        if has_critic:
            layout["critic"] = devices(0, policy)
        used = policy
    else:
        layout = {"actor_train": devices(0, policy)}
        used = policy
        if t.get(f"{PL}.colocate_policy_ref"):
            layout["reference"] = devices(0, policy)
        else:
            ref_nodes, ref_per_node = _block(t, "ref")
            layout["reference"] = devices(used, ref_nodes * ref_per_node)
            used += ref_nodes * ref_per_node
            widest = max(widest, ref_per_node)
        if has_critic:
            c_nodes, c_per_node = _block(t, "critic")
            layout["critic"] = devices(used, c_nodes * c_per_node)
            used += c_nodes * c_per_node
            widest = max(widest, c_per_node)
        layout["actor_infer"] = devices(used, engine_devices)
        used += engine_devices
    for role, mapping in layout.items():
        t.native.setdefault(role, {})["device_mapping"] = mapping
    t.native["num_gpus_per_node"] = widest
    t.native["num_nodes"] = max(1, math.ceil(used / widest))


def _batches(t: Translation, has_critic: bool) -> None:
    n = t.int(f"{G}.n_samples_per_prompt", 1)
    train_batch = t.int(f"{T}.train_batch_size", 1024)
    micro = t.int(f"{T}.micro_train_batch_size_per_gpu", 1)
    roles = [("actor_train", "policy")] + ([("critic", "critic")] if has_critic else [])
    for role, src in roles:
        path = f"{T}.{src}_mini_batch_size"
        mini = t.int(path, 256)
        section = t.native.get(role, {})
        dp = max(1, len(section.get("device_mapping") or [0]) // _model_parallel(section))
        if mini <= 0 or train_batch % mini:
            t.error(path, f"{mini} must divide trainer.train_batch_size = {train_batch} (SkyRL takes whole "
                    "mini-batches from each batch)")
            continue
        samples = mini * n
        accumulation = gradient_accumulation(samples, micro, dp)
        if accumulation is None:
            t.error(path, f"{src}_mini_batch_size × n_samples_per_prompt = {mini} × {n} = {samples} samples is not "
                    f"divisible by micro_train_batch_size_per_gpu × dp = {micro} × {dp} (SkyRL's "
                    "validate_batch_sizes refuses it)")
            continue
        t.native.setdefault(role, {}).setdefault("training_args", {})["gradient_accumulation_steps"] = accumulation


def _model_parallel(section: dict[str, Any]) -> int:
    """Ranks that share one model copy: Ulysses SP (FSDP) or TP × PP × CP (Megatron)."""
    cfg = section.get("strategy_args", {}).get("strategy_config", {})
    if str(section.get("strategy_args", {}).get("strategy_name", "")).startswith("megatron"):
        return int(cfg.get("tensor_model_parallel_size") or 1) * int(cfg.get("pipeline_model_parallel_size") or 1) \
            * int(cfg.get("context_parallel_size") or 1)
    return int(cfg.get("ulysses_sequence_parallel_size", 1))


def _schedule(t: Translation) -> None:
    if t.has(f"{T}.epochs"):
        t.warn(f"{T}.epochs", f"= {t.get(f'{T}.epochs')} not imported: steps per epoch depend on the dataset size; "
               "set max_steps")
    import_save_interval(t, f"{T}.ckpt_interval")
    mode = t.get(f"{T}.resume_mode")
    if mode is not None:
        mode = str(mode).lower()
        if mode not in RESUME and mode != "null":
            t.error(f"{T}.resume_mode", f"{mode!r} is not a SkyRL resume mode; valid: {', '.join(RESUME)}")
        elif mode == "latest":
            t.set("resume_from_checkpoint", True, f"{T}.resume_mode")
        elif mode == "from_path":
            if not t.has(f"{T}.resume_path"):
                t.error(f"{T}.resume_path", "is required when resume_mode is from_path")
            else:
                t.set("resume_from_checkpoint", str(t.get(f"{T}.resume_path")), f"{T}.resume_path")
        else:
            t.set("resume_from_checkpoint", False, f"{T}.resume_mode")
    if t.has(f"{T}.resume_path") and mode != "from_path":
        t.warn(f"{T}.resume_path", "not imported: used only when resume_mode is from_path")


def _generation(t: Translation) -> None:
    limit, prompt = t.get(f"{G}.max_input_length"), t.get(f"{T}.max_prompt_length", 512)
    if limit is not None and limit != prompt:
        t.warn(f"{G}.max_input_length", f"= {limit} not imported: it limits multi-turn inputs; single-turn prompts "
               f"are limited by prompt_length = {prompt}")
    urls = engine_path(t, "remote_inference_engine_urls")
    if t.written(urls):
        warn_unused(t, urls, "remote inference engines are not supported")


def _off_policy_correction(t: Translation) -> None:
    """SkyRL's correction of the rollout-training mismatch, rho = exp(old - rollout) (its recomputed old log-probs
    over the engine's), as train_infer_correction (docs/decisions/0040), same formulas: the truncated weight
    min(rho, cap) at token or sequence level multiplies the policy loss (use_tis, or v0.4's tis_ratio_type), and the
    sequence masks (geometric mean or product of rho inside a band) and the token mask remove samples / tokens from
    it. SkyRL masks the policy term only; here the removed tokens also leave the KL and entropy terms (a warning)."""
    weights: list[tuple[dict[str, Any], str]] = []  # both spellings set: the first wins, the second is a conflict
    cap_path = f"{ALG}.tis_imp_ratio_cap"
    if t.get(f"{ALG}.use_tis"):
        cap = t.get(cap_path, -1.0)
        if isinstance(cap, bool) or not isinstance(cap, int | float) or cap <= 0:
            t.error(f"{ALG}.use_tis", f"needs tis_imp_ratio_cap > 0 (it is {cap!r}; SkyRL refuses it too); e.g. the "
                    f"override {cap_path}=2.0")
            return
        weights.append((mismatch_weight("token", float(cap)), f"{ALG}.use_tis"))
    elif t.written(cap_path):
        t.warn(cap_path, f"= {t.get(cap_path)!r} not imported: used only with use_tis")
    kind = t.get(f"{OPC}.tis_ratio_type")
    for level in ("token", "sequence"):
        if kind != level and t.written(f"{OPC}.{level}_tis_ratio_clip_high"):
            t.warn(f"{OPC}.{level}_tis_ratio_clip_high", f"= {t.get(f'{OPC}.{level}_tis_ratio_clip_high')!r} not "
                   f"imported: used only when tis_ratio_type is {level}")
    if kind is not None:
        if kind not in ("token", "sequence"):
            t.error(f"{OPC}.tis_ratio_type", f"= {kind!r} is not a tis_ratio_type this importer knows; valid: token, "
                    f"sequence; to run this file without it, use the override ~{OPC}.tis_ratio_type")
            return
        bound = positive_number(t, f"{OPC}.{kind}_tis_ratio_clip_high", 2.0 if kind == "token" else 5.0)
        if bound is None:
            return
        weights.append((mismatch_weight(kind, bound), f"{OPC}.tis_ratio_type"))
    for weight, source in weights:
        t.set(f"{MISMATCH}.is_weight", weight, source)
    filters, filter_source = _masks(t)
    if not filters:
        return
    t.set(f"{MISMATCH}.filters", filters, filter_source)
    terms = [name for name, on in (("KL", t.get(f"{ALG}.use_kl_loss")), ("entropy", t.get(f"{ALG}.use_entropy_loss")))
             if on]
    if terms:
        t.warn(filter_source, f"imported as a filter of the actor's loss; SkyRL masks the policy term only, here the "
               f"masked tokens also leave the {' and '.join(terms)} term{'s' if len(terms) > 1 else ''}")


def _masks(t: Translation) -> tuple[list[dict[str, Any]], str]:
    """SkyRL's sequence mask (sequence_mask_metric) and token mask (token_mask_is_threshold_low / _high, both needed)
    as native filters, with the key that switches the first one on."""
    filters: list[dict[str, Any]] = []
    source = ""
    metric = t.get(f"{OPC}.sequence_mask_metric")
    for name, (_, low_key, high_key, _, _) in SEQUENCE_MASKS.items():
        if metric != name:
            for key in (low_key, high_key):
                if t.written(f"{OPC}.{key}"):
                    t.warn(f"{OPC}.{key}", f"= {t.get(f'{OPC}.{key}')!r} not imported: used only when "
                           f"sequence_mask_metric is {name}")
    if metric is not None:
        if metric not in SEQUENCE_MASKS:
            t.error(f"{OPC}.sequence_mask_metric", f"= {metric!r} is not a sequence_mask_metric this importer knows; "
                    f"valid: {', '.join(SEQUENCE_MASKS)}; to run this file without it, use the override "
                    f"~{OPC}.sequence_mask_metric")
            return [], ""
        level, low_key, high_key, low_default, high_default = SEQUENCE_MASKS[metric]
        low, high = t.get(f"{OPC}.{low_key}", low_default), positive_number(t, f"{OPC}.{high_key}", high_default)
        if high is None or isinstance(low, bool) or not isinstance(low, int | float) or low > high:
            t.error(f"{OPC}.{low_key}", f"= {low!r} must be a number <= {high_key} ({high}); to run this file with "
                    f"SkyRL's default, use the override ~{OPC}.{low_key}")
            return [], ""
        filters.append(mismatch_filter(level, float(low), high))
        source = f"{OPC}.sequence_mask_metric"
    low_key, high_key = f"{OPC}.token_mask_is_threshold_low", f"{OPC}.token_mask_is_threshold_high"
    low, high = t.get(low_key), t.get(high_key)
    if (low is None) != (high is None):
        given = low_key if low is not None else high_key
        t.warn(given, f"= {t.get(given)!r} not imported: SkyRL applies the token mask only with both "
               "token_mask_is_threshold_low and _high")
    elif low is not None:
        upper = positive_number(t, high_key)
        if upper is None or isinstance(low, bool) or not isinstance(low, int | float) or low > upper:
            t.error(low_key, f"= {low!r} must be a number <= token_mask_is_threshold_high ({high!r}); to run this "
                    f"file without the token mask, use the override ~{low_key}")
            return [], ""
        filters.append(mismatch_filter("token", float(low), upper))
        source = source or low_key
        if metric is not None or t.get(f"{OPC}.tis_ratio_type") == "sequence":
            t.warn(low_key, "imported as a token filter; SkyRL sums a sequence's log-ratio (sequence weight or mask) "
                   "over the tokens the token mask kept, here over all its response tokens")
    return filters, source
