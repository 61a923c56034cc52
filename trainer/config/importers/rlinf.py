"""RLinf (reasoning / agentic RL configs) -> native schema.

RLinf counts samples: `data.rollout_batch_size` prompts × `algorithm.group_size` responses, split
into `algorithm.n_minibatches` optimizer steps of `training_batch_size_per_gpu` per rank:
gradient_accumulation_steps = rollout_batch_size × group_size / n_minibatches / (micro × dp), with
dp = actor devices / (TP × PP). `runner.seq_length` is prompt + response, so
response_length = seq_length − data.max_prompt_length (RLinf writes `${subtract:…}` for it).
`cluster.component_placement` ("actor,rollout: all", "actor: 0-3") becomes device_mapping.
PPO configs (`critic.use_critic_model: true`, adv_type gae) get a critic role built like the actor:
the `critic.*` keys that mirror `actor.*` land on the critic, initialised from the policy model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from trainer.config.importers.common import (
    drop_unused_reference,
    fill_model_paths,
    import_save_interval,
    positive_interval,
    settle_strategies,
    warn_unused,
)
from trainer.config.importers.rules import Rule, Translation, choice, to_dtype
from trainer.config.topology import gradient_accumulation

NAME = "rlinf"
SIGNATURE = ("cluster", "runner", "algorithm", "rollout", "data", "actor", "reward")
REQUIRED = ("cluster", "runner")
ASSUMED_GPUS_PER_NODE = 8

TRAIN_BACKEND = choice({"megatron": "megatron_train", "fsdp": "fsdp2_train", "fsdp2": "fsdp2_train"},
                       "training_backend")
FORWARD = {"megatron_train": "megatron_infer", "fsdp2_train": "fsdp2_infer"}
ROLLOUT_BACKEND = choice({"sglang": "sglang", "vllm": "vllm"}, "rollout_backend")
# Early RLinf math examples name them grpo-math (advantage) and math_actor / grpo / grpo_actor (the PPO-clipped loss).
ADV = choice({"grpo": "grpo", "math_grpo": "grpo", "grpo-math": "grpo", "gae": "gae", "ppo": "gae",
              "reinpp": "reinforce_plus_plus", "reinpp_baseline": "reinforce_plus_plus_baseline", "rloo": "rloo"},
             "adv_type")
LOSS = choice({"actor": "ppo", "ppo": "ppo", "math_ppo_actor": "ppo", "math_actor": "ppo", "grpo": "ppo",
               "grpo_actor": "ppo", "gspo": "gspo"}, "loss_type")
LOSS_AGG = choice({m: m for m in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                                  "seq-mean-token-sum-norm")}, "loss_agg_func")
KL = choice({"kl": "kl", "k1": "kl", "abs": "abs", "mse": "mse", "k2": "mse", "low_var_kl": "low_var_kl",
             "k3": "low_var_kl", "full": "full"}, "kl_penalty_type")
DECAY = choice({"constant": "constant", "linear": "linear", "cosine": "cosine"}, "lr_decay_style")
OPTIMIZER = choice({"adam": "adamw", "adamw": "adamw", "sgd": "sgd"}, "optimizer")
COMPONENTS = {"actor": "actor_train", "rollout": "actor_infer", "critic": "critic"}

ARCH = "model architecture comes from the HF model's config.json"
NO_DEBUG = "a debugging aid of RLinf with no native counterpart"
MEGATRON_CONV = "Megatron weights are converted from the HF model at start; no converter settings"
COLOCATED = "colocated roles always offload their state between phases"


def _logger(value: Any) -> str:
    names = [value] if isinstance(value, str) else list(value)
    for name in ("wandb", "swanlab", "tensorboard"):
        if name in names:
            return name
    raise ValueError(f"logger_backends {value!r}: expected tensorboard, wandb or swanlab")


def _not(value: bool) -> bool:
    return not value


def _template(value: bool) -> str:
    return "native" if value else "none"


def _eos(value: int) -> list[int]:
    return [int(value)]


def _grouped_gemm(value: Any) -> bool:
    return value not in (None, False, "none", "null")  # RLinf: te (Transformer Engine) or null


def _arch(key: str, implied: Any, example: Any) -> Rule:
    return Rule(f"actor.model.{key}", None, example, implied=implied, note=ARCH)


def _converter_rules(src: str) -> list[Rule]:
    examples = {"model": "Qwen2.5-7B", "model_type": "qwen2", "hf_model_path": "/models/hf", "save_path": "/ckpt/mg",
                "use_gpu_num": 2, "use_gpu_index": 1, "process_num": 8, "tensor_model_parallel_size": 4,
                "pipeline_model_parallel_size": 2}
    return [Rule(f"{src}.{key}", None, example, note=MEGATRON_CONV) for key, example in examples.items()]


MEGATRON = "actor_train.strategy_args.strategy_config"
FSDP = "actor_train.strategy_args.strategy_config"
INFER = "actor_infer.strategy_args.strategy_config"
GEN = "actor_infer.generating_args"
TA = "actor_train.training_args"

RULES: list[Rule] = [
    # cluster
    Rule("cluster.num_nodes", "num_nodes", 2, note="with component_placement, sizes every role's device_mapping"),
    Rule("cluster.num_gpus_per_node", "num_gpus_per_node", 4, derived=True,
         note="devices per node, as RLinf's early math examples write it (later releases count them at start; "
         f"{ASSUMED_GPUS_PER_NODE} is assumed then)"),
    Rule("cluster.component_placement", "actor_train.device_mapping", {"actor": "0-3", "rollout": "4-7"},
         derived=True, note="actor → actor_train (and reference), rollout → actor_infer; 'all' = every device"),
    # runner
    Rule("runner.task_type", None, "embodied", implied="reasoning", note="only the reasoning (RLVR) task is "
         "imported"),
    Rule("runner.logger.log_path", "logging_dir", "/logs/run1"),
    Rule("runner.logger.project_name", "tracker_kwargs.project", "my_project"),
    Rule("runner.logger.experiment_name", "tracker_kwargs.name", "my_run"),
    Rule("runner.logger.logger_backends", "track_with", ["wandb"], _logger),
    Rule("runner.max_epochs", "max_steps", 3, derived=True, note="epochs need the dataset size; used only to "
         "report when runner.max_steps is -1"),
    Rule("runner.max_steps", "max_steps", 123, derived=True, note="-1 (derive from epochs) is reported"),
    Rule("runner.val_check_interval", "eval_steps", 3, positive_interval, "-1 disables evaluation"),
    Rule("runner.save_interval", "save_steps", 4, derived=True, note="-1 (never) keeps only the final checkpoint"),
    Rule("runner.seq_length", "sequence_length", 3000, derived=True,
         note="response_length = seq_length − data.max_prompt_length"),
    Rule("runner.enable_dynamic_batch_size", "actor_train.use_dynamic_bsz", True),
    Rule("runner.max_tokens_per_mbs", "actor_train.max_token_len_per_gpu", 4096, derived=True,
         note="used when runner.enable_dynamic_batch_size"),
    Rule("runner.resume_dir", "resume_from_checkpoint", "/ckpt/global_step_10"),
    Rule("runner.experiment_name", "exp_name", "my_experiment"),
    Rule("runner.output_dir", "output_dir", "/runs"),
    # algorithm
    Rule("algorithm.group_size", "num_return_sequences_in_group", 6),
    Rule("algorithm.n_minibatches", "actor_train.training_args.gradient_accumulation_steps", 4, derived=True,
         note="optimizer steps per rollout: accumulation = rollout_batch_size × group_size / n_minibatches / "
         "(micro × dp)"),
    Rule("algorithm.training_batch_size_per_gpu", f"{TA}.per_device_train_batch_size", 2),
    Rule("algorithm.rollout_batch_size_per_gpu", None, 8,
         note="requests are scheduled by the engine (max_running_requests)"),
    Rule("algorithm.logprob_forward_micro_batch_size", "actor_train.infer_batch_size", 3,
         note="also the reference's infer_batch_size"),
    Rule("algorithm.val_rollout_batch_size_per_gpu", None, 8,
         note="evaluation requests are scheduled by the engine"),
    Rule("algorithm.recompute_logprobs", None, False, implied=True, note="old log-probs are always recomputed "
         "by actor_train"),
    Rule("algorithm.shuffle_rollout", None, True, implied=False, note="mini-batches are taken in rollout order"),
    Rule("algorithm.loss_type", "policy_loss", "gspo", LOSS, "actor/ppo → ppo"),
    Rule("algorithm.loss_agg_func", "loss_agg_mode", "seq-mean-token-mean", LOSS_AGG),
    Rule("algorithm.kl_beta", "kl_loss_coef", 0.003, note="a KL loss term: use_kl_loss = kl_beta > 0"),
    Rule("algorithm.kl_penalty_type", "kl_penalty", "mse", KL),
    Rule("algorithm.ratio_clip_eps", "pg_clip", 0.15),
    Rule("algorithm.entropy_bonus", "entropy_loss_coef", 0.002),
    Rule("algorithm.calculate_entropy", None, False, implied=True, note="entropy is always computed and logged"),
    Rule("algorithm.clip_ratio_c", "clip_ratio_c", 4.0, note="set (not null): dual_clip_loss = true"),
    Rule("algorithm.clip_ratio_low", "pg_clip_low", 0.18),
    Rule("algorithm.clip_ratio_high", "pg_clip_high", 0.28),
    Rule("algorithm.ratio_clip_low", "pg_clip_low", 0.17, note="early math examples' name of clip_ratio_low"),
    Rule("algorithm.ratio_clip_high", "pg_clip_high", 0.27, note="early math examples' name of clip_ratio_high"),
    Rule("algorithm.adv_type", "adv_estimator", "reinpp", ADV),
    Rule("algorithm.normalize_advantages", "whiten_advantages", False),
    Rule("algorithm.early_stop_imp_ratio", None, 3.0, note="no early stop on the importance ratio"),
    Rule("algorithm.use_valid_token_scale", None, True, implied=False,
         note="loss scaling follows loss_agg_mode only"),
    Rule("algorithm.sampling_params.use_greedy", f"{GEN}.do_sample", True, _not, "inverted"),
    Rule("algorithm.sampling_params.do_sample", f"{GEN}.do_sample", False),
    Rule("algorithm.sampling_params.temperature", f"{GEN}.temperature", 0.7),
    Rule("algorithm.sampling_params.top_k", f"{GEN}.top_k", 40),
    Rule("algorithm.sampling_params.top_p", f"{GEN}.top_p", 0.9),
    Rule("algorithm.sampling_params.repetition_penalty", f"{GEN}.repetition_penalty", 1.1),
    Rule("algorithm.sampling_params.max_new_tokens", f"{GEN}.max_new_tokens", 555),
    Rule("algorithm.sampling_params.min_new_tokens", f"{GEN}.min_new_tokens", 3),
    # rollout
    Rule("rollout.group_name", None, "Gen", implied="RolloutGroup", note="worker groups are named by role"),
    Rule("rollout.gpu_memory_utilization", f"{INFER}.gpu_memory_utilization", 0.45),
    Rule("rollout.model_dir", "pretrain", "/models/qwen", note="the HF model of every role"),
    Rule("rollout.model_arch", None, "qwen3", note=ARCH),
    Rule("rollout.model.model_path", "pretrain", "/models/qwen", note="newer spelling of rollout.model_dir"),
    Rule("rollout.model.model_type", None, "qwen3", note=ARCH),
    Rule("rollout.model.precision", "actor_infer.model_args.dtype", "bf16", to_dtype),
    Rule("rollout.precision", "actor_infer.model_args.dtype", "bf16", to_dtype),
    Rule("rollout.enforce_eager", f"{INFER}.enforce_eager", True),
    Rule("rollout.distributed_executor_backend", None, "ray", implied="mp", note="engine processes are managed "
         "by the engine"),
    Rule("rollout.disable_log_stats", f"{INFER}.disable_log_stats", True),
    Rule("rollout.detokenize", None, True, implied=False, note=NO_DEBUG),
    Rule("rollout.padding", None, 0, note="the pad id comes from the tokenizer"),
    Rule("rollout.eos", f"{GEN}.stop_token_ids", 2, _eos, "an extra stop token id"),
    Rule("rollout.rollout_backend", "actor_infer.strategy_args.strategy_name", "vllm", ROLLOUT_BACKEND),
    Rule("rollout.attention_backend", f"{INFER}.attention_backend", "flashinfer", note="SGLang only"),
    Rule("rollout.sglang.attention_backend", f"{INFER}.attention_backend", "flashinfer", note="SGLang only"),
    Rule("rollout.sglang.decode_log_interval", None, 1000, note=NO_DEBUG),
    Rule("rollout.sglang.use_torch_compile", None, True, implied=False, note="engines run without torch.compile"),
    Rule("rollout.sglang.torch_compile_max_bs", None, 64, implied=128, note="engines run without torch.compile"),
    Rule("rollout.vllm.attention_backend", None, "XFORMERS", implied="FLASH_ATTN",
         note="vLLM picks its attention kernel itself"),
    Rule("rollout.vllm.enable_chunked_prefill", f"{INFER}.enable_chunked_prefill", False, note="vLLM only"),
    Rule("rollout.vllm.enable_prefix_caching", f"{INFER}.enable_prefix_caching", False, note="vLLM only"),
    Rule("rollout.vllm.enable_flash_infer_sampler", None, False, implied=True, note="vLLM picks its sampler"),
    Rule("rollout.vllm.max_num_batched_tokens", f"{INFER}.max_num_batched_tokens", 4096, note="vLLM only"),
    Rule("rollout.vllm.torch_profiler_dir", None, "/prof", note=NO_DEBUG),
    Rule("rollout.return_logprobs", None, True, implied=False, note="old log-probs are recomputed by actor_train"),
    Rule("rollout.tensor_parallel_size", f"{INFER}.tensor_parallel_size", 2),
    Rule("rollout.pipeline_parallel_size", f"{INFER}.pipeline_parallel_size", 2),
    Rule("rollout.validate_weight", None, True, implied=False, note=NO_DEBUG),
    Rule("rollout.validate_save_dir", None, "/tmp/w", note=NO_DEBUG),
    Rule("rollout.print_outputs", None, True, implied=False, note=NO_DEBUG),
    Rule("rollout.sglang_decode_log_interval", None, 1000, note=NO_DEBUG),
    Rule("rollout.max_running_requests", f"{INFER}.max_num_seqs", 32,
         note="the engine's concurrent requests: vLLM max_num_seqs, SGLang max_running_requests"),
    Rule("rollout.cuda_graph_max_bs", None, 64, implied=128, note="the engine sizes CUDA graphs itself"),
    Rule("rollout.use_torch_compile", None, True, implied=False, note="engines run without torch.compile"),
    Rule("rollout.torch_compile_max_bs", None, 64, implied=128, note="engines run without torch.compile"),
    # data
    Rule("data.type", None, "code", implied="math", note="the task family; rewards follow reward.reward_type"),
    Rule("data.dataset_name", None, "boba", note="a label only; the data comes from train_data_paths"),
    Rule("data.max_prompt_length", "prompt_length", 333),
    Rule("data.filter_prompt_by_length", None, False, implied=True,
         note="longer prompts are reported as errors (truncation_side error), not dropped"),
    Rule("data.rollout_batch_size", "rollout_batch_size", 64),
    Rule("data.val_rollout_batch_size", "val_batch_size", 96),
    Rule("data.num_workers", f"{TA}.dataloader_num_workers", 3),
    Rule("data.prompt_key", "actor_train.data_args.prompt", "question"),
    Rule("data.answer_key", "actor_train.data_args.response", "answer"),
    Rule("data.apply_chat_template", "actor_train.data_args.template", True, _template,
         "true → native (the tokenizer's chat template), false → none"),
    Rule("data.shuffle", "actor_train.data_args.shuffle", False),
    Rule("data.validation_shuffle", "validation.data_args.shuffle", False),
    Rule("data.seed", f"{TA}.data_seed", 7),
    Rule("data.train_data_paths", "actor_train.data_args.file_name", ["/data/train.jsonl"]),
    Rule("data.val_data_paths", "validation.data_args.file_name", ["/data/val.jsonl"],
         note="also creates the validation section with the training data's columns"),
    # actor
    Rule("actor.group_name", None, "Train", implied="ActorGroup", note="worker groups are named by role"),
    Rule("actor.training_backend", "actor_train.strategy_args.strategy_name", "fsdp", TRAIN_BACKEND,
         "megatron → megatron_train, fsdp/fsdp2 → fsdp2_train (reference: *_infer)"),
    Rule("actor.mcore_gpt", None, False, implied=True, note="Megatron-Core GPT is the only Megatron model"),
    Rule("actor.spec_name", None, "other", implied="decoder_gpt", note=ARCH),
    Rule("actor.checkpoint_load_path", None, "/ckpt/mg", note=MEGATRON_CONV),
    Rule("actor.offload_optimizer", None, False, implied=True, note=COLOCATED),
    Rule("actor.offload_weight", None, False, implied=True, note=COLOCATED),
    Rule("actor.offload_grad", None, False, implied=True, note=COLOCATED),
    Rule("actor.enable_dp_load_balance", None, True, implied=False, note="micro-batches are split evenly"),
    Rule("actor.calculate_flops", None, True, implied=False, note=NO_DEBUG),
    Rule("actor.seed", f"{TA}.seed", 7),
    Rule("actor.enable_offload", None, False, implied=True, note=COLOCATED),
    Rule("actor.global_batch_size", None, 16,
         note="RLinf's FSDP actor batch knob; optimizer steps follow algorithm.n_minibatches here"),
    Rule("actor.micro_batch_size", None, 2,
         note="RLinf's FSDP actor batch knob; the micro-batch is algorithm.training_batch_size_per_gpu here"),
    Rule("actor.model.model_path", "actor_train.model_args.model_name_or_path", "/models/actor"),
    Rule("actor.model.model_type", None, "qwen3", note=ARCH),
    Rule("actor.model.is_lora", None, True, implied=False,
         note="LoRA is set with actor_train.model_args.lora_rank (RLinf's lora settings are not imported)"),
    Rule("actor.model.precision", "actor_train.model_args.dtype", "bf16", to_dtype),
    _arch("add_bias_linear", False, True),
    Rule("actor.model.tensor_model_parallel_size", f"{MEGATRON}.tensor_model_parallel_size", 2, note="Megatron only; "
         "also the reference's"),
    Rule("actor.model.pipeline_model_parallel_size", f"{MEGATRON}.pipeline_model_parallel_size", 2,
         note="Megatron only; also the reference's"),
    _arch("activation", "swiglu", "gelu"),
    Rule("actor.model.sequence_parallel", f"{MEGATRON}.sequence_parallel", False, note="Megatron only"),
    Rule("actor.model.recompute_method", f"{MEGATRON}.recompute_method", "uniform", note="Megatron only"),
    Rule("actor.model.recompute_granularity", f"{MEGATRON}.recompute_granularity", "selective",
         note="Megatron only"),
    Rule("actor.model.recompute_num_layers", f"{MEGATRON}.recompute_num_layers", 4, note="Megatron only"),
    Rule("actor.model.seq_length", "sequence_length", 3000, derived=True, note="must equal runner.seq_length"),
    Rule("actor.model.encoder_seq_length", "sequence_length", 3000, derived=True,
         note="must equal runner.seq_length"),
    _arch("normalization", "rmsnorm", "layernorm"),
    _arch("position_embedding_type", "rope", "learned_absolute"),
    _arch("apply_rope_fusion", True, False),
    _arch("bias_dropout_fusion", False, True),
    _arch("persist_layer_norm", False, True),
    _arch("bias_activation_fusion", False, True),
    _arch("attention_softmax_in_fp32", True, False),
    _arch("batch_p2p_comm", False, True),
    _arch("variable_seq_lengths", True, False),
    _arch("gradient_accumulation_fusion", False, True),
    Rule("actor.model.moe_token_dispatcher_type", f"{MEGATRON}.moe_token_dispatcher_type", "allgather",
         note="Megatron only"),
    Rule("actor.model.expert_model_parallel_size", f"{MEGATRON}.expert_model_parallel_size", 2, note="Megatron only"),
    Rule("actor.model.expert_tensor_parallel_size", f"{MEGATRON}.expert_tensor_parallel_size", 2,
         note="Megatron only"),
    Rule("actor.model.moe_grouped_gemm", f"{MEGATRON}.moe_grouped_gemm", "te", _grouped_gemm,
         "te → true, null → false (Megatron only)"),
    Rule("actor.model.moe_aux_loss_coeff", "actor_train.model_args.moe_aux_loss_coef", 0.01),
    _arch("use_cpu_initialization", False, True),
    Rule("actor.optim.optimizer", f"{TA}.optim", "sgd", OPTIMIZER, "Megatron's adam is AdamW (decoupled decay)"),
    Rule("actor.optim.bf16", f"{TA}.bf16", False),
    Rule("actor.optim.fp16", f"{TA}.fp16", True),
    Rule("actor.optim.lr", f"{TA}.learning_rate", 3e-6),
    Rule("actor.optim.adam_beta1", f"{TA}.adam_beta1", 0.8),
    Rule("actor.optim.adam_beta2", f"{TA}.adam_beta2", 0.98),
    Rule("actor.optim.adam_eps", f"{TA}.adam_epsilon", 1e-6),
    Rule("actor.optim.min_lr", f"{TA}.min_lr_ratio", 1e-7, derived=True, note="min_lr_ratio = min_lr / lr"),
    Rule("actor.optim.weight_decay", f"{TA}.weight_decay", 0.03),
    Rule("actor.optim.use_distributed_optimizer", f"{MEGATRON}.use_distributed_optimizer", False,
         note="Megatron only"),
    Rule("actor.optim.overlap_grad_reduce", f"{MEGATRON}.overlap_grad_reduce", False, note="Megatron only"),
    Rule("actor.optim.overlap_param_gather", f"{MEGATRON}.overlap_param_gather", False, note="Megatron only"),
    Rule("actor.optim.optimizer_enable_pin", None, True, implied=False, note="optimizer memory is not pinned"),
    Rule("actor.optim.overlap_param_gather_with_optimizer_step", None, True, implied=False,
         note="not supported by the Megatron strategy here"),
    Rule("actor.optim.clip_grad", f"{TA}.max_grad_norm", 0.7),
    Rule("actor.optim.loss_scale", None, 1024, note="fp16 loss scaling is dynamic"),
    Rule("actor.optim.loss_scale_window", None, 10, note="fp16 loss scaling uses the strategy's defaults"),
    Rule("actor.lr_sched.lr_warmup_fraction", f"{TA}.warmup_ratio", 0.05),
    Rule("actor.lr_sched.lr_warmup_init", None, 1e-7, implied=0.0, note="warmup starts from 0"),
    Rule("actor.lr_sched.lr_warmup_iters", f"{TA}.warmup_steps", 7, note="takes precedence over the fraction"),
    Rule("actor.lr_sched.max_lr", f"{TA}.learning_rate", 3e-6, derived=True, note="must equal actor.optim.lr"),
    Rule("actor.lr_sched.min_lr", f"{TA}.min_lr_ratio", 1e-7, derived=True,
         note="min_lr_ratio = min_lr / lr (when actor.optim.min_lr is unset)"),
    Rule("actor.lr_sched.lr_decay_style", f"{TA}.lr_scheduler_type", "cosine", DECAY),
    Rule("actor.lr_sched.lr_decay_iters", None, 100, note="the decay spans the whole run (max_steps)"),
    Rule("actor.tokenizer.tokenizer_model", None, "/models/other-tok", derived=True,
         note="the tokenizer loads from the model path; a different path is reported"),
    Rule("actor.tokenizer.use_fast", None, True, implied=False, note="the tokenizer's own default is used"),
    Rule("actor.tokenizer.trust_remote_code", "actor_train.model_args.trust_remote_code", True),
    Rule("actor.tokenizer.padding_side", None, "left", implied="right",
         note="padding sides are fixed per role (left for generation)"),
    Rule("actor.megatron.ddp_bucket_size", None, 1000000, note="Megatron's default bucket size is used"),
    Rule("actor.megatron.distributed_backend", None, "gloo", implied="nccl",
         note="NCCL on GPU, gloo on CPU, chosen by the device"),
    Rule("actor.megatron.distributed_timeout_minutes", "actor_train.backend_timeout", 45),
    Rule("actor.megatron.ckpt_format", None, "torch_dist", implied="torch", note="checkpoints use the trainer's "
         "own format"),
    Rule("actor.megatron.use_dist_ckpt", None, True, implied=False, note="checkpoints use the trainer's own format"),
    Rule("actor.megatron.tp_comm_bootstrap_backend", None, "mpi", implied="nccl", note="bootstrapped by NCCL"),
    Rule("actor.megatron.tp_comm_overlap_cfg", None, "/cfg/overlap.yaml", note="TP comm overlap is not configured"),
    Rule("actor.megatron.use_hf_ckpt", None, False, implied=True, note=MEGATRON_CONV),
    Rule("actor.megatron.use_profiler", None, True, implied=False, note=NO_DEBUG),
    *_converter_rules("actor.megatron.ckpt"),
    *_converter_rules("actor.megatron.ckpt_convertor"),
    Rule("actor.megatron.profiler", None, {"with_stack": True}, note=NO_DEBUG),
    Rule("actor.fsdp_config.strategy", None, "fsdp", implied="fsdp2", note="FSDP2 is used for fsdp and fsdp2"),
    Rule("actor.fsdp_config.gradient_checkpointing", "actor_train.model_args.disable_gradient_checkpointing", True,
         _not, "inverted: disable_gradient_checkpointing = not gradient_checkpointing"),
    Rule("actor.fsdp_config.sharding_strategy", None, "full_shard",
         note="FSDP2 shards fully; use fsdp_size for hybrid sharding"),
    Rule("actor.fsdp_config.cpu_offload", f"{FSDP}.cpu_offload", True, note="FSDP only"),
    Rule("actor.fsdp_config.fsdp_size", f"{FSDP}.fsdp_size", 2, note="FSDP only"),
    Rule("actor.fsdp_config.amp_grad_scaler.enabled", None, True, implied=False, note="no gradient scaler is used"),
    Rule("actor.fsdp_config.offload_pin_memory", f"{FSDP}.offload_pin_memory", True, note="FSDP only"),
    Rule("actor.fsdp_config.reshard_after_forward", f"{FSDP}.reshard_after_forward", False, note="FSDP only"),
    Rule("actor.fsdp_config.enable_gradient_accumulation", None, False, implied=True,
         note="gradients are reduced once per optimizer step"),
    Rule("actor.fsdp_config.forward_prefetch", None, True, implied=False, note="FSDP2 prefetches by itself"),
    Rule("actor.fsdp_config.limit_all_gathers", None, True, implied=False, note="FSDP2 has no such limit"),
    Rule("actor.fsdp_config.backward_prefetch", None, "pre", note="FSDP2 prefetches by itself"),
    Rule("actor.fsdp_config.use_orig_params", None, True, implied=False, note="FSDP2 always keeps original "
         "parameters"),
    Rule("actor.fsdp_config.use_liger_kernel", None, True, implied=False, note="Liger kernels are not used"),
    Rule("actor.fsdp_config.mixed_precision.param_dtype", f"{FSDP}.param_dtype", "bf16", to_dtype, "FSDP only"),
    Rule("actor.fsdp_config.mixed_precision.reduce_dtype", f"{FSDP}.reduce_dtype", "fp32", to_dtype, "FSDP only"),
    Rule("actor.fsdp_config.mixed_precision.buffer_dtype", None, "fp32", note="buffers keep the model's dtype"),
    Rule("actor.fsdp_config.amp_autocast.enabled", None, True, implied=False,
         note="precision follows the FSDP mixed-precision dtypes"),
    Rule("actor.fsdp_config.amp_autocast.precision", None, "fp16", implied="bf16",
         note="precision follows the FSDP mixed-precision dtypes"),
    Rule("actor.fsdp_config.grad_scaler.enabled", None, True, implied=False, note="no gradient scaler is used"),
    Rule("actor.fsdp_config.grad_scaler.init_scale", None, 1024.0, note="no gradient scaler is used"),
    Rule("actor.fsdp_config.grad_scaler.growth_interval", None, 100, note="no gradient scaler is used"),
    # reward
    Rule("reward.group_name", None, "Score", implied="RewardGroup", note="worker groups are named by role"),
    Rule("reward.use_reward_model", None, True, implied=False, note="RLinf reasoning rewards are rule-based"),
    Rule("reward.reward_type", "rewards.math.reward_type", "code", derived=True, note="math → math_rule"),
    Rule("reward.reward_scale", "rewards.math.reward_kwargs.reward_scale", 2.5, derived=True,
         note="correct answers score reward_scale; RLinf's −reward_scale for wrong ones becomes 0 (a shift that "
         "group normalisation removes)"),
    Rule("reward.tokenizer", None, {"use_fast": True},
         note="follows actor.tokenizer; the reward is rule-based and needs no tokenizer"),
    Rule("critic.use_critic_model", "critic", True, derived=True,
         note="true creates the critic (PPO with adv_type gae), initialised from the policy model"),
    Rule("algorithm.value_clip", "value_clip", 0.4, derived=True, note="used when there is a critic"),
    Rule("algorithm.gamma", "gamma", 0.99),
    Rule("algorithm.gae_lambda", "lambd", 0.9),
    Rule("algorithm.critic_warmup_steps", "critic_warmup", 2),
    Rule("inference", None, {"group_name": "LogProbGroup"},
         note="a separate log-prob component is not imported; actor_train computes old log-probs"),
]

# The critic of PPO configs mirrors the actor: the same keys land on the critic role.
CRITIC_MIRRORED = ("training_backend", "optim.", "lr_sched.lr_warmup_fraction", "lr_sched.lr_warmup_iters",
                   "lr_sched.lr_decay_style", "lr_sched.lr_decay_iters", "lr_sched.max_lr", "lr_sched.min_lr",
                   "model.precision", "model.tensor_model_parallel_size",
                   "model.pipeline_model_parallel_size", "model.sequence_parallel", "model.recompute_",
                   "megatron.distributed_timeout_minutes", "fsdp_config.cpu_offload", "fsdp_config.fsdp_size",
                   "fsdp_config.reshard_after_forward", "fsdp_config.offload_pin_memory", "fsdp_config.mixed_precision.")
RULES += [dataclasses.replace(rule, source=f"critic.{rule.source.removeprefix('actor.')}",
                              target=rule.target.replace("actor_train.", "critic.", 1) if rule.target else None)
          for rule in list(RULES)
          if rule.source.startswith("actor.") and rule.source.removeprefix("actor.").startswith(CRITIC_MIRRORED)
          and (rule.target or "actor_train.").startswith("actor_train.")]

# RLinf's own defaults where the native default means something else.
DEFAULTS: dict[str, Any] = {
    "algorithm": {"group_size": 1, "n_minibatches": 1, "training_batch_size_per_gpu": 1, "ratio_clip_eps": 0.2,
                  "adv_type": "grpo", "loss_agg_func": "token-mean", "kl_beta": 0.0,
                  "kl_penalty_type": "low_var_kl", "entropy_bonus": 0.0},
    "actor": {"training_backend": "megatron"},
    "rollout": {"rollout_backend": "sglang"},
    "reward": {"reward_type": "math"},
}


def parse_placement(text: Any, total: int) -> list[int]:
    """RLinf device sets: 'all', '0-3', '0-3,8-11', 5, [0, 1]."""
    if isinstance(text, int):
        return [text]
    if isinstance(text, list):
        return [int(x) for x in text]
    text = str(text).strip()
    if text == "all":
        return list(range(total))
    out: list[int] = []
    for part in text.split(","):
        start, _, end = part.strip().partition("-")
        if not start.strip().isdigit() or (end and not end.strip().isdigit()):
            raise ValueError(f"{text!r} is not a device set; use all, 0-3, 0-3,8-11 or a device id")
        out.extend(range(int(start), int(end or start) + 1))
    return out


def finish(t: Translation) -> None:
    _placement(t)
    has_critic = _critic(t)
    _lengths(t)
    _kl_and_clip(t)
    _strategies(t)
    for role, src in (("actor_train", "actor"), ("critic", "critic"))[: 2 if has_critic else 1]:
        _batches(t, role, src)
        _optimizer(t, role, src)
    _schedule(t)
    _refuse_agent_tasks(t)
    _rewards(t)
    if "validation" in t.native:
        data = t.native["validation"].setdefault("data_args", {})
        for key, value in (t.native["actor_train"].get("data_args") or {}).items():
            if key not in ("file_name", "shuffle"):
                data.setdefault(key, value)
    fill_model_paths(t, ("actor_train", "actor_infer", "reference", "critic"))
    drop_unused_reference(t)
    settle_strategies(t)


def _critic(t: Translation) -> bool:
    """RLinf trains a critic when critic.use_critic_model; it needs its own devices in component_placement."""
    wanted = bool(t.get("critic.use_critic_model"))
    if not wanted:
        t.native.pop("critic", None)
        warn_unused(t, "critic", "no critic is created (critic.use_critic_model is false)")
        if t.get("algorithm.adv_type") in ("gae", "ppo"):
            t.error("critic.use_critic_model", "adv_type gae needs a critic: set critic.use_critic_model: true")
        elif t.written("algorithm.value_clip"):
            t.warn("algorithm.value_clip", "not imported: there is no critic (critic.use_critic_model is false)")
        return False
    if "device_mapping" not in t.native.get("critic", {}):
        t.error("critic.use_critic_model", "true, but cluster.component_placement names no devices for the critic; "
                "add critic to a component set, e.g. 'actor,critic,rollout,reward: all'")
        return False
    if t.has("algorithm.value_clip"):
        t.set("value_clip", t.float("algorithm.value_clip"), "algorithm.value_clip")
    args = t.native["critic"].setdefault("strategy_args", {})
    args.setdefault("strategy_name", t.native.get("actor_train", {}).get("strategy_args", {}).get("strategy_name"))
    return True


def _placement(t: Translation) -> None:
    placement = t.get("cluster.component_placement")
    nodes = t.int("cluster.num_nodes", 1)
    per_node = t.int("cluster.num_gpus_per_node", ASSUMED_GPUS_PER_NODE)
    total = nodes * per_node
    if placement is None:
        t.required("cluster.component_placement", "which devices run actor and rollout",
                   "\"{'actor,rollout,reward': all}\"")
        return
    if not isinstance(placement, dict):
        t.error("cluster.component_placement", "must map component names to device sets")
        return
    if any(str(v).strip() == "all" for v in placement.values()) and not t.has("cluster.num_gpus_per_node"):
        t.warn("cluster.component_placement", f"'all' assumes {ASSUMED_GPUS_PER_NODE} devices per node "
               f"(RLinf counts them at start); override num_gpus_per_node if yours differ")
    for names, where in placement.items():
        path = f"cluster.component_placement.{names}"
        try:
            mapping = parse_placement(where, total)
        except ValueError as exc:
            t.error(path, str(exc))
            continue
        for name in str(names).split(","):
            name = name.strip()
            role = COMPONENTS.get(name)
            if role is not None:
                t.native.setdefault(role, {})["device_mapping"] = mapping
                if role == "actor_train":
                    t.native.setdefault("reference", {})["device_mapping"] = mapping
            elif name not in ("reward", "inference"):
                t.warn(path, f"component {name!r} not imported: only actor, critic, rollout and reward are placed")
    highest = max((d for r in ("actor_train", "actor_infer", "critic")
                   for d in t.native.get(r, {}).get("device_mapping", [])), default=0)
    t.set("num_gpus_per_node", per_node, "cluster.num_gpus_per_node")
    if highest >= total:
        t.native["num_nodes"] = highest // per_node + 1


def _lengths(t: Translation) -> None:
    seq, prompt = t.get("runner.seq_length"), t.get("data.max_prompt_length", 1024)
    if seq is None:
        t.required("runner.seq_length", "prompt + response tokens", 2048)
        return
    if seq <= prompt:
        t.error("runner.seq_length", f"{seq} leaves no room for a response after data.max_prompt_length = {prompt}")
        return
    t.set("sequence_length", int(seq), "runner.seq_length")
    t.set("response_length", int(seq - prompt), "runner.seq_length")
    if t.get("rollout.rollout_backend") == "vllm":  # RLinf's vLLM worker starts the engine with this length
        t.set(f"{INFER}.max_model_len", int(seq), "runner.seq_length")
    for key in ("seq_length", "encoder_seq_length"):
        value = t.get(f"actor.model.{key}")
        if value is not None and value != seq:
            t.warn(f"actor.model.{key}", f"= {value} not imported: differs from runner.seq_length = {seq}, which "
                   "is used")


def _kl_and_clip(t: Translation) -> None:
    beta = t.float("algorithm.kl_beta", 0.0)
    t.native["use_kl_loss"] = beta > 0
    t.origin.setdefault("use_kl_loss", "algorithm.kl_beta")
    if t.get("algorithm.clip_ratio_c") is not None:
        t.native["dual_clip_loss"] = True


def _strategies(t: Translation) -> None:
    train = t.native.get("actor_train", {}).get("strategy_args", {}).get("strategy_name")
    if train is None:
        return
    ref = t.native.setdefault("reference", {})
    ref["strategy_args"] = {"strategy_name": FORWARD[train], "strategy_config": {}}
    if train == "megatron_train":
        cfg = t.native["actor_train"]["strategy_args"].get("strategy_config", {})
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
            if key in cfg:
                ref["strategy_args"]["strategy_config"][key] = cfg[key]
    if "infer_batch_size" in t.native["actor_train"]:
        ref["infer_batch_size"] = t.native["actor_train"]["infer_batch_size"]


def _dp(t: Translation, role: str, src: str) -> int:
    section = t.native.get(role, {})
    world = len(section.get("device_mapping") or [0])
    cfg = section.get("strategy_args", {}).get("strategy_config", {})
    if section.get("strategy_args", {}).get("strategy_name") == "megatron_train":
        model_parallel = int(cfg.get("tensor_model_parallel_size", 1)) * int(cfg.get("pipeline_model_parallel_size", 1))
        if world % model_parallel:
            t.error(f"{src}.model.tensor_model_parallel_size", f"TP × PP = {model_parallel} does not divide the "
                    f"{src}'s {world} devices")
            return 0
        return world // model_parallel
    return world


def _batches(t: Translation, role: str, src: str) -> None:
    dp = _dp(t, role, src)
    if not dp:
        return
    prompts = t.int("data.rollout_batch_size", 1)
    group = t.int("algorithm.group_size", 1)
    steps = t.int("algorithm.n_minibatches", 1)
    micro = t.int("algorithm.training_batch_size_per_gpu", 1)
    samples = prompts * group
    if steps <= 0 or samples % steps:
        t.error("algorithm.n_minibatches", f"{steps} does not divide data.rollout_batch_size × group_size = "
                f"{prompts} × {group} = {samples} samples")
        return
    per_step = samples // steps
    accumulation = gradient_accumulation(per_step, micro, dp)
    if accumulation is None:
        unit = steps * micro * dp // math.gcd(steps * micro * dp, group)  # prompts that fill whole passes
        fit = max(unit, round(prompts / unit) * unit)
        t.error("algorithm.n_minibatches", f"each of the {steps} mini-batches holds {per_step} samples, not a "
                f"multiple of training_batch_size_per_gpu × dp = {micro} × {dp}; {fit} prompts of {group} "
                f"samples fill them: override data.rollout_batch_size={fit}")
        return
    ta = f"{role}.training_args"
    t.set(f"{ta}.gradient_accumulation_steps", accumulation, "algorithm.n_minibatches")
    if role != "actor_train":
        t.set(f"{ta}.per_device_train_batch_size", micro, "algorithm.training_batch_size_per_gpu")


def _schedule(t: Translation) -> None:
    if t.get("runner.enable_dynamic_batch_size") and t.has("runner.max_tokens_per_mbs"):
        t.set("actor_train.max_token_len_per_gpu", t.int("runner.max_tokens_per_mbs"), "runner.max_tokens_per_mbs")
    elif t.written("runner.max_tokens_per_mbs"):
        t.warn("runner.max_tokens_per_mbs", f"= {t.get('runner.max_tokens_per_mbs')} not imported: used only with "
               "runner.enable_dynamic_batch_size, as in RLinf")
    steps = t.int("runner.max_steps") if t.has("runner.max_steps") else None
    if steps is not None and steps > 0:
        t.set("max_steps", int(steps), "runner.max_steps")
        if t.written("runner.max_epochs"):
            t.warn("runner.max_epochs", f"= {t.get('runner.max_epochs')} not imported: runner.max_steps = {steps} "
                   "takes precedence, as in RLinf")
    elif t.has("runner.max_epochs"):
        t.warn("runner.max_epochs", f"= {t.get('runner.max_epochs')} not imported: runner.max_steps is -1 and "
               "steps per epoch depend on the dataset size; set max_steps")
    import_save_interval(t, "runner.save_interval")


# RLinf rewards PolicyLab does not build: (what it is, the built reward_type nearest to it or None, what that trains)
UNBUILT_REWARDS: dict[str, tuple[str, str | None, str]] = {
    "rstar2": ("rStar2-Agent's reward (math answers reached through python tool calls in the agent loop)", "math",
               "single-turn math scored by the math rule reward, without the tool calls"),
    "searchr1": ("Search-R1's exact-match reward over multi-turn search-tool rollouts", None, ""),
    "code_offline": ("RLinf's code_offline reward (code scored by an offline judge service)", None, ""),
}


def _refuse_agent_tasks(t: Translation) -> None:
    """RLinf's agent tasks: the agent loop and the online coding task are not built; the error says so first,
    instead of a later symptom ("training prompts are missing")."""
    if t.get("runner.task_type") == "coding_online_rl":
        t.error("runner.task_type", "= 'coding_online_rl' is refused: RLinf's online coding RL (prompts and "
                "rewards come from users of a live code-completion service; the file's data section is unused) "
                "is not built, and no file of prompts stands in for it")
    if t.has("agentloop"):
        t.error("agentloop", "RLinf's agent loop (multi-turn rollouts with tool calls: agentloop, tools) is not "
                "built; the nearest built is single-turn training on the file's prompts: override ~agentloop")


def _rewards(t: Translation) -> None:
    kind = t.get("reward.reward_type", "math")
    if kind != "math":
        what, near, trains = UNBUILT_REWARDS.get(kind, (f"the reward {kind!r}", None, ""))
        fix = f"; the nearest built is {trains}: override reward.reward_type={near}" if near else ""
        t.error("reward.reward_type", f"{kind!r} is refused: {what} is not built; valid here: math (→ math_rule)"
                f"{fix}")
        return
    section: dict[str, Any] = {"reward_type": "math_rule"}
    scale = t.get("reward.reward_scale")
    if scale is not None:
        section["reward_kwargs"] = {"reward_scale": float(scale)}
        t.warn("reward.reward_scale", f"wrong answers score 0 here instead of RLinf's −{scale}; correct ones score "
               f"{scale} (group-normalised advantages are the same)")
    t.native["rewards"] = {"math": section}
    tok, model = t.get("actor.tokenizer.tokenizer_model"), t.get("rollout.model.model_path", t.get("rollout.model_dir"))
    if tok is not None and tok != model:
        t.warn("actor.tokenizer.tokenizer_model", f"= {tok!r} not imported: the tokenizer loads from the model "
               f"path {model!r}")


def _optimizer(t: Translation, role: str, src: str) -> None:
    ta = f"{role}.training_args"
    lr = t.get(f"{src}.optim.lr")
    max_lr = t.get(f"{src}.lr_sched.max_lr")
    if lr is None and max_lr is not None:
        lr = max_lr
        t.set(f"{ta}.learning_rate", float(max_lr), f"{src}.lr_sched.max_lr")
    elif max_lr is not None and max_lr != lr:
        t.warn(f"{src}.lr_sched.max_lr", f"= {max_lr} not imported: the peak learning rate is {src}.optim.lr = {lr}")
    min_lr = t.get(f"{src}.optim.min_lr", t.get(f"{src}.lr_sched.min_lr"))
    source = f"{src}.optim.min_lr" if t.has(f"{src}.optim.min_lr") else f"{src}.lr_sched.min_lr"
    if min_lr is not None and not lr:
        t.warn(source, f"= {min_lr} not imported: needs {src}.optim.lr to become min_lr_ratio")
    elif min_lr is not None:
        ratio = float(min_lr) / float(lr)
        if not 0 <= ratio <= 1:
            t.error(source, f"{min_lr} must lie between 0 and {src}.optim.lr = {lr}")
        else:
            t.set(f"{ta}.min_lr_ratio", ratio, source)
    floor, sched_floor = t.get(f"{src}.optim.min_lr"), t.get(f"{src}.lr_sched.min_lr")
    if floor is not None and sched_floor is not None and sched_floor != floor:
        t.warn(f"{src}.lr_sched.min_lr", f"= {sched_floor} not imported: the floor is {src}.optim.min_lr = {floor}")
