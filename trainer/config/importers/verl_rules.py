"""verl's tables for the verl importer (trainer.config.importers.verl): its section signature, the value
choices, the key -> native key rules (`RULES`), the recipes it refuses and the defaults ppo_trainer.yaml documents.
The fixes that need more than one key are in `verl.finish`; the rollout correction in `verl_correction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.config.importers.common import (
    MISMATCH,
    positive_interval,
)
from trainer.config.importers.rules import Rule, choice, to_dtype

NAME = "verl"
SIGNATURE = ("actor_rollout_ref", "data", "critic", "reward_model", "algorithm", "trainer")
REQUIRED = ("actor_rollout_ref",)

ARR = "actor_rollout_ref"
TRAIN_STRATEGY = choice({"fsdp": "fsdp2_train", "fsdp2": "fsdp2_train", "megatron": "megatron_train"}, "strategy")
ROLLOUT_ENGINE = choice({"vllm": "vllm", "sglang": "sglang", "hf": "hf_infer"}, "rollout name")
LOAD_FORMAT = choice(
    {"dummy": "dummy", "dummy_dtensor": "dummy", "dummy_hf": "dummy", "dummy_megatron": "dummy", "dtensor": "auto",
     "hf": "auto", "megatron": "auto", "auto": "auto", "safetensors": "safetensors"},
    "load_format",
)
LOSS_MODE = choice({"vanilla": "ppo", "gspo": "gspo"}, "policy_loss.loss_mode (other verl loss modes are not built)")
LR_DECAY = choice({"constant": "constant", "linear": "linear", "cosine": "cosine"}, "lr_decay_style")
MEGATRON_OPTIMIZER = choice({"adam": "adamw", "adamw": "adamw", "sgd": "sgd"}, "optimizer")
FILTER_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")
WARMUP_STYLE = choice({"constant": "constant", "cosine": "cosine", "linear": "linear"}, "warmup_style")
ADV_ESTIMATOR = choice(
    {"gae": "gae", "grpo": "grpo", "reinforce_plus_plus": "reinforce_plus_plus",
     "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline", "rloo": "rloo", "remax": "remax"},
    "adv_estimator",
)
KL_ESTIMATOR = choice({"kl": "kl", "k1": "kl", "abs": "abs", "mse": "mse", "k2": "mse", "low_var_kl": "low_var_kl",
                       "k3": "low_var_kl", "full": "full"}, "KL estimator")
KL_CTRL = choice({"fixed": "fixed", "adaptive": "adaptive"}, "kl_ctrl type")
TRUNCATION = choice({"error": "error", "left": "left", "right": "right"}, "truncation")
LOSS_AGG = choice({m: m for m in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                                  "seq-mean-token-sum-norm")}, "loss_agg_mode")

TRAIN_OFFLOAD = ("param_offload", "grad_offload", "optimizer_offload", "offload_policy")
NO_CODE = "code named in a config is never imported; models and tokenizers load from their path"
REMOVE_PADDING = "padding-free sequences: use_sequence_packing (attention within each sample)"
FSDP2_WRAP = "FSDP2 shards each decoder layer; the wrap policy is fixed"
MULTI_TURN = "applies only with multi_turn.enable, which is refused"
RC = "algorithm.rollout_correction"  # verl main's rollout correction
LOG_PROBS = f"{ARR}.rollout.calculate_log_probs"
LEVELS = ("token", "sequence", "geometric")  # verl's levels of rho = pi_old / pi_rollout, the native ones too
NO_VETO = ("not imported: a veto rejects a whole sequence for its lowest token ratio; the native filters read a "
           "token's ratio or a sequence's aggregate (a token filter with ratio_low drops the token, not the sequence)")


def _logger(value: Any) -> str:
    names = [value] if isinstance(value, str) else list(value)
    for ours in ("wandb", "swanlab", "tensorboard"):
        if ours in names:
            return ours
    if "console" in names:
        return "stdout"
    raise ValueError(f"logger {value!r}: none of console, wandb, swanlab, tensorboard")


def _not(value: bool) -> bool:
    return not value


def _warmup_steps(value: int) -> int:
    return max(value, 0)  # verl: -1 means "use lr_warmup_steps_ratio", as 0 does here


def _positive_or_unset(value: int) -> int | None:
    return value if value > 0 else None  # verl: -1 (or 0) means "no limit"


def _lora_rank(value: int) -> int | None:
    return value if value > 0 else None  # verl: 0 trains all weights


def _optim_rules(src: str, role: str) -> list[Rule]:
    ta = f"{role}.training_args"
    return [
        Rule(f"{src}.lr", f"{ta}.learning_rate", 3e-6),
        Rule(f"{src}.lr_warmup_steps", f"{ta}.warmup_steps", 7, _warmup_steps, "-1 (use the ratio) becomes 0"),
        Rule(f"{src}.lr_warmup_steps_ratio", f"{ta}.warmup_ratio", 0.05),
        Rule(f"{src}.min_lr_ratio", f"{ta}.min_lr_ratio", 0.1),
        Rule(f"{src}.warmup_style", f"{ta}.lr_scheduler_type", "cosine", WARMUP_STYLE),
        Rule(f"{src}.weight_decay", f"{ta}.weight_decay", 0.03),
        Rule(f"{src}.total_training_steps", None, 77, implied=-1,
             note="verl injects it at run time; here the schedule length follows max_steps"),
        Rule(f"{src}.clip_grad", f"{ta}.max_grad_norm", 0.7, note="Megatron's name for grad_clip"),
        Rule(f"{src}.betas", f"{ta}.adam_beta1", [0.8, 0.95], derived=True, note="[beta1, beta2] → adam_beta1, "
             "adam_beta2 (Megatron optimizer)"),
        Rule(f"{src}.optimizer", f"{ta}.optim", "sgd", MEGATRON_OPTIMIZER, "Megatron's adam is AdamW (decoupled decay)"),
        Rule(f"{src}.lr_decay_style", f"{ta}.lr_scheduler_type", "cosine", LR_DECAY,
             "Megatron's schedule name; warmup-stable-decay styles are not available"),
        Rule(f"{src}.min_lr", f"{ta}.min_lr_ratio", 1e-7, derived=True, note="min_lr_ratio = min_lr / lr"),
    ]


def _fsdp_rules(src: str, role: str, offload_keys: tuple[str, ...]) -> list[Rule]:
    cfg = f"{role}.strategy_args.strategy_config"
    rules = [
        Rule(f"{src}.wrap_policy.min_num_params", None, 1000, implied=0, note=FSDP2_WRAP),
        Rule(f"{src}.wrap_policy.transformer_layer_cls_to_wrap", None, "Qwen2DecoderLayer", note=FSDP2_WRAP),
        Rule(f"{src}.min_num_params", None, 1000, implied=0, note=FSDP2_WRAP),
        Rule(f"{src}.fsdp_size", f"{cfg}.fsdp_size", 4),
        Rule(f"{src}.reshard_after_forward", f"{cfg}.reshard_after_forward", False),
    ]
    rules += [
        Rule(f"{src}.{key}", f"{cfg}.cpu_offload", True, derived=True,
             note="FSDP2 offloads parameters, gradients and optimizer state together: cpu_offload = any of them")
        for key in offload_keys
    ]
    return rules


def _micro_rules(src: str, role: str, per_gpu: str, global_: str, target: str, what: str) -> list[Rule]:
    return [
        Rule(f"{src}.{per_gpu}", f"{role}.{target}", 4, derived=True, note=f"{what}, per GPU"),
        Rule(f"{src}.{global_}", f"{role}.{target}", 32, derived=True,
             note=f"deprecated global {what}: divided by the data-parallel size"),
    ]


MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                  "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size")
MEGATRON_EXAMPLES = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
                     "virtual_pipeline_model_parallel_size": 2, "context_parallel_size": 2,
                     "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2}


def _megatron_rules(src: str, role: str, train: bool) -> list[Rule]:
    """actor/ref/critic `megatron.*`: parallel sizes, offload and distributed checkpoints (MegatronConfig)."""
    cfg = f"{role}.strategy_args.strategy_config"
    rules = [Rule(f"{src}.{key}", f"{cfg}.{key}", MEGATRON_EXAMPLES[key], note="Megatron only")
             for key in MEGATRON_SIZES]
    rules += [
        Rule(f"{src}.sequence_parallel", f"{cfg}.sequence_parallel", False, note="Megatron only"),
        Rule(f"{src}.param_offload", f"{cfg}.param_offload", True, note="Megatron only"),
        Rule(f"{src}.use_dist_checkpointing", f"{cfg}.use_dist_checkpointing", True, note="Megatron only"),
        Rule(f"{src}.dist_checkpointing_path", f"{cfg}.dist_checkpointing_path", "/ckpt/dist", note="Megatron only"),
    ]
    if train:
        rules += [
            Rule(f"{src}.grad_offload", f"{cfg}.grad_offload", True, note="Megatron only"),
            Rule(f"{src}.optimizer_offload", f"{cfg}.optimizer_offload", True, note="Megatron only"),
            Rule(f"{src}.use_distributed_optimizer", f"{cfg}.use_distributed_optimizer", False, note="Megatron only"),
        ]
    else:
        rules.append(Rule(f"{src}.use_distributed_optimizer", None, True, implied=False,
                          note="a forward-only role has no optimizer"))
    if src == f"{ARR}.actor.megatron":
        rules += [Rule(f"{src}.override_transformer_config.{key}", f"{cfg}.{key}", example, note="Megatron only")
                  for key, example in (("recompute_granularity", "selective"), ("recompute_method", "block"),
                                       ("recompute_num_layers", 2))]
    return rules



@dataclass(frozen=True)
class UnbuiltRecipe:
    what: str  # the objective / estimator / trained component, and the recipe it comes from
    example: Any  # a value the key takes (the docs' example)
    override: str  # the override that trains the nearest built thing
    nearest: str  # what that is


# verl-recipe keys that select what PolicyLab does not build (verl-project/verl-recipe@48ea0a7 and verl's recipe/).
UNBUILT_RECIPES: dict[str, UnbuiltRecipe] = {
    "algorithm.tb_coef": UnbuiltRecipe(
        "FlowRL's trajectory-balance objective (recipe/flowrl)", 15.0, "~algorithm.tb_coef",
        "PPO with the file's estimator (FlowRL's reward, no flow balancing)"),
    "actor_rollout_ref.actor.gvpo_beta": UnbuiltRecipe(
        "GVPO's group-variance objective (recipe/gvpo: its own actor class and estimator)", 0.1,
        "~actor_rollout_ref.actor.gvpo_beta",
        "PPO with the file's estimator (GAE and a critic in gvpo_trainer.yaml; GRPO, the group baseline GVPO's runs "
        "use, with algorithm.adv_estimator=grpo as well)"),
    "algorithm.sppo_eta": UnbuiltRecipe(
        "SPPO's self-play preference objective (recipe/sppo: a squared loss on the log-ratio against eta-scaled "
        "win rates)", 1.0, "~algorithm.sppo_eta",
        "PPO with the file's estimator (SPPO's file leaves algorithm.adv_estimator null; add "
        "algorithm.adv_estimator=grpo for group-relative advantages)"),
    "actor_rollout_ref.actor.dpo_beta": UnbuiltRecipe(
        "SPIN's self-play DPO objective (recipe/spin: the policy against its previous iterate)", 0.1,
        "~actor_rollout_ref.actor.dpo_beta",
        "PPO with the file's estimator (SPIN's file leaves algorithm.adv_estimator null; add "
        "algorithm.adv_estimator=grpo for group-relative advantages)"),
    "reward_model.prime_granularity": UnbuiltRecipe(
        "PRIME's online implicit process reward model (recipe/prime: a reward model trained with the policy)", "token",
        "reward_model.enable=false",
        "the file's estimator (RLOO) on its rule reward alone, PRIME's outcome verifier, without the implicit PRM"),
    "atropos.api_url": UnbuiltRecipe(
        "Atropos environments (recipe/atropos: rollouts scored by an Atropos environment server)",
        "http://localhost:8000", "~atropos", "the file's estimator on its own prompts and reward function"),
    "trainer.spo.enable": UnbuiltRecipe(
        "SPO's single-stream estimator (recipe/spo: a KL-adaptive value tracker per prompt as the baseline)", True,
        "trainer.spo.enable=false", "the file's estimator with its group baseline"),
    **{f"actor_rollout_ref.actor.{engine}.qat.enable": UnbuiltRecipe(
        "quantization-aware training (recipe/qat: the actor trains through fake-quantized NVFP4 weights)", True,
        f"actor_rollout_ref.actor.{engine}.qat.enable=false", "the same recipe in the model's own precision")
       for engine in ("fsdp_config", "megatron")},
    "async_flow.staleness": UnbuiltRecipe(
        "AsyncFlow's streaming GRPO (recipe/async_flow: separate forward and train pools, rollouts up to "
        "`staleness` policy versions old)", 1, "~async_flow.staleness",
        "synchronous training with the file's estimator (GRPO as its run scripts set algorithm.adv_estimator=grpo; "
        "async_generation_ratio in the native file runs rollouts one step ahead)"),
}

RULES: list[Rule] = [
    # data
    Rule("data.tokenizer", None, "/models/tok", note="the tokenizer is loaded from the model path"),
    Rule("data.train_files", "actor_train.data_args.file_name", "/data/train.parquet"),
    Rule("data.val_files", "validation.data_args.file_name", "/data/test.parquet",
         note="also creates the validation section with the training data's columns"),
    Rule("data.prompt_key", "actor_train.data_args.messages", "question",
         note="verl's prompt column holds a chat (list of role/content messages)"),
    Rule("data.max_prompt_length", "prompt_length", 333),
    Rule("data.max_response_length", "response_length", 444),
    Rule("data.train_batch_size", "rollout_batch_size", 64, note="prompts per step; also checked against "
         "ppo_mini_batch_size"),
    Rule("data.val_batch_size", "val_batch_size", 96),
    Rule("data.return_raw_input_ids", None, True, implied=False,
         note="a reward model here decodes responses and applies its own tokenizer anyway"),
    Rule("data.return_raw_chat", None, True, implied=False, note="prompts are always kept as chats"),
    Rule("data.truncation", "actor_train.data_args.truncation_side", "left", TRUNCATION),
    Rule("data.shuffle", "actor_train.data_args.shuffle", False),
    # data: keys of newer verl releases
    Rule("data.filter_overlong_prompts", None, True, implied=False,
         note="prompts longer than prompt_length follow truncation_side (error by default) instead of being dropped"),
    Rule("data.filter_overlong_prompts_workers", None, 4, note="no prompt filtering pass"),
    Rule("data.reward_fn_key", "actor_train.data_args.tag", "source",
         note="the column naming each sample's domain, which rewards select on (tag_included)"),
    Rule("data.validation_shuffle", "validation.data_args.shuffle", True, derived=True,
         note="used when data.val_files creates the validation section"),
    Rule("data.seed", "actor_train.training_args.data_seed", 7),
    Rule("data.train_max_samples", "actor_train.data_args.max_samples", 100, _positive_or_unset, "-1: all rows"),
    Rule("data.val_max_samples", "validation.data_args.max_samples", 50, derived=True,
         note="-1: all rows; used when data.val_files creates the validation section"),
    Rule("data.dataloader_num_workers", None, 2, implied=8, note="prompts are tokenized once, in the driver"),
    # DAPO recipe (recipe/dapo: dynamic sampling and overlong reward shaping)
    Rule("data.gen_batch_size", "max_additional_running_prompts", 96, derived=True,
         note="DAPO generates gen_batch_size prompts at a time to refill filtered groups; here the batch is "
         "train_batch_size and the refill budget is max_num_gen_batches × gen_batch_size − train_batch_size"),
    Rule("algorithm.filter_groups.enable", "is_use_additional_prompts", True, derived=True,
         note="true → every reward's query_filter_config is a std_filter at 0 (groups whose rewards are all "
         "equal leave the loss) and is_use_additional_prompts draws replacement prompts"),
    Rule("algorithm.filter_groups.metric", "rewards.*.query_filter_config", "seq_reward", derived=True,
         note="acc, score, seq_reward, seq_final_reward: all filter on the sequence reward"),
    # recipes whose objective is not built: refused (running them as PPO would train something else)
    *[Rule(key, None, recipe.example, derived=True, note=f"refused: {recipe.what} is not built")
      for key, recipe in UNBUILT_RECIPES.items()],
    Rule("algorithm.filter_groups.max_num_gen_batches", "max_additional_running_prompts", 10, derived=True,
         note="bounds the replacement prompts of a step (0, unbounded in DAPO: 3 × train_batch_size here)"),
    Rule("reward_model.overlong_buffer.enable", None, True, implied=False,
         note="DAPO's overlong reward shaping is not built (a per-token length penalty is planned)"),
    Rule("reward_model.overlong_buffer.len", None, 512, implied=0, note="DAPO's overlong reward shaping is not built"),
    Rule("reward_model.overlong_buffer.penalty_factor", None, 1.0, implied=0.0,
         note="DAPO's overlong reward shaping is not built"),
    Rule("reward_model.overlong_buffer.log", None, True, implied=False, note="DAPO's overlong reward shaping is not "
         "built"),
    Rule("data.custom_cls.path", None, "/code/ds.py", note=NO_CODE),
    Rule("data.custom_cls.name", None, "MyDataset", note=NO_CODE),
    Rule("data.image_key", None, "pixels", implied="images", note="multi-modal prompts are not supported"),
    Rule("data.video_key", None, "clips", implied="videos", note="multi-modal prompts are not supported"),
    # actor_rollout_ref: common
    Rule(f"{ARR}.hybrid_engine", None, False, implied=True,
         note="roles on the same devices always take turns (offload/onload); a separate engine needs separate "
         "device_mapping"),
    Rule(f"{ARR}.model.path", "pretrain", "/models/qwen", note="also the model of actor_train, actor_infer "
         "and reference"),
    Rule(f"{ARR}.model.external_lib", None, "my_models", note=NO_CODE),
    Rule(f"{ARR}.model.external_libs", None, "my_models", note=NO_CODE),
    Rule(f"{ARR}.model.override_config", "actor_train.model_args.model_config_kwargs", {"attention_dropout": 0.1}),
    Rule(f"{ARR}.model.enable_gradient_checkpointing", "actor_train.model_args.disable_gradient_checkpointing",
         False, _not, "inverted: disable_gradient_checkpointing = not enable_gradient_checkpointing"),
    Rule(f"{ARR}.model.use_remove_padding", "actor_train.use_sequence_packing", True, derived=True,
         note=REMOVE_PADDING + " on actor_train and the reference"),
    Rule(f"{ARR}.actor.use_remove_padding", "actor_train.use_sequence_packing", True, derived=True,
         note=REMOVE_PADDING + " on actor_train"),
    Rule(f"{ARR}.model.trust_remote_code", "actor_train.model_args.trust_remote_code", True),
    Rule(f"{ARR}.model.lora_rank", "actor_train.model_args.lora_rank", 16, _lora_rank,
         "0 trains all weights; > 0 (FSDP) also makes a vllm engine serve the adapter (actor_infer's enable_lora; a "
         "dummy load_format becomes auto), as verl starts vLLM with enable_lora and syncs the adapter only"),
    Rule(f"{ARR}.model.lora_alpha", "actor_train.model_args.lora_alpha", 32, derived=True,
         note="used when lora_rank > 0"),
    Rule(f"{ARR}.model.target_modules", "actor_train.model_args.lora_target", "q_proj,v_proj", derived=True,
         note="used when lora_rank > 0 (a list becomes a comma-separated string)"),
    Rule(f"{ARR}.model.lora_adapter_path", "actor_train.model_args.adapter_name_or_path", "/adapters/sft",
         derived=True, note="a trained PEFT LoRA folder actor_train goes on training (verl loads it as trainable); "
         "needs lora_rank > 0 with the adapter's rank, alpha and target modules (checked before launch, where verl "
         "takes them from the adapter); the engine serves it, the reference stays the base model, as in verl"),
    Rule(f"{ARR}.model.use_liger", None, True, implied=False, note="Liger kernels are not used"),
    Rule(f"{ARR}.model.return_last_hidden_state", None, True, implied=False, note="not needed by the losses here"),
    Rule(f"{ARR}.model.use_fused_loss", None, True, implied=False, note="log-probs are computed unfused"),
    # actor
    Rule(f"{ARR}.actor.strategy", "actor_train.strategy_args.strategy_name", "megatron", TRAIN_STRATEGY,
         "fsdp (FSDP1) runs as FSDP2 here"),
    Rule(f"{ARR}.actor.ppo_mini_batch_size", "actor_train.training_args.gradient_accumulation_steps", 16,
         derived=True, note="prompts per optimizer step: accumulation = mini × n / (micro × dp); "
         "train_batch_size must be a multiple"),
    *_micro_rules(f"{ARR}.actor", "actor_train", "ppo_micro_batch_size_per_gpu", "ppo_micro_batch_size",
                  "training_args.per_device_train_batch_size", "training micro-batch"),
    Rule(f"{ARR}.actor.use_dynamic_bsz", "actor_train.use_dynamic_bsz", True),
    Rule(f"{ARR}.actor.ppo_max_token_len_per_gpu", "actor_train.max_token_len_per_gpu", 8192),
    Rule(f"{ARR}.actor.grad_clip", "actor_train.training_args.max_grad_norm", 0.7),
    Rule(f"{ARR}.actor.clip_ratio", "pg_clip", 0.15),
    Rule(f"{ARR}.actor.clip_ratio_low", "pg_clip_low", 0.18),
    Rule(f"{ARR}.actor.clip_ratio_high", "pg_clip_high", 0.28),
    Rule(f"{ARR}.actor.clip_ratio_c", "clip_ratio_c", 4.0,
         note="verl's vanilla loss always applies the dual clip: dual_clip_loss is true with policy_loss ppo"),
    Rule(f"{ARR}.actor.policy_loss.loss_mode", "policy_loss", "gspo", LOSS_MODE,
         "vanilla → ppo, gspo → gspo; other loss modes (clip-cov, kl-cov, gpg, …) are refused"),
    Rule(f"{ARR}.actor.loss_agg_mode", "loss_agg_mode", "seq-mean-token-sum", LOSS_AGG),
    Rule(f"{ARR}.actor.entropy_coeff", "entropy_loss_coef", 0.002),
    Rule(f"{ARR}.actor.use_kl_loss", "use_kl_loss", True),
    Rule(f"{ARR}.actor.kl_loss_coef", "kl_loss_coef", 0.003),
    Rule(f"{ARR}.actor.kl_loss_type", "kl_penalty", "mse", derived=True,
         note="the KL estimator when use_kl_loss (native kl_penalty serves both KL terms)"),
    Rule(f"{ARR}.actor.ppo_epochs", "ppo_epochs", 3),
    Rule(f"{ARR}.actor.tis_imp_ratio_cap", f"{MISMATCH}.is_weight", 2.5, derived=True,
         note="> 0 (v0.5's truncated IS, with rollout.calculate_log_probs): is_weight at token level, upper_bound = "
         "the cap: verl's vanilla loss times min(pi_old / pi_rollout, cap); -1: off; not with other loss modes"),
    Rule(f"{ARR}.actor.use_torch_compile", None, False, implied=True, note="the trainer decides on compilation"),
    Rule(f"{ARR}.actor.checkpoint.contents", None, ["model"],
         note="checkpoints always hold model, optimizer, scheduler and RNG state"),
    Rule(f"{ARR}.actor.shuffle", None, True, implied=False, note="mini-batches are taken in rollout order"),
    Rule(f"{ARR}.actor.ulysses_sequence_parallel_size",
         "actor_train.strategy_args.strategy_config.ulysses_sequence_parallel_size", 2,
         note="FSDP only; the data-parallel size becomes GPUs / this"),
    *_optim_rules(f"{ARR}.actor.optim", "actor_train"),
    *_fsdp_rules(f"{ARR}.actor.fsdp_config", "actor_train", TRAIN_OFFLOAD),
    *_megatron_rules(f"{ARR}.actor.megatron", "actor_train", train=True),
    # reference
    Rule(f"{ARR}.ref.strategy", "reference.strategy_args.strategy_name", "megatron",
         choice({"fsdp": "fsdp2_infer", "fsdp2": "fsdp2_infer", "megatron": "megatron_infer"}, "strategy"),
         "fsdp/fsdp2 → fsdp2_infer, megatron → megatron_infer; unset follows the actor"),
    Rule(f"{ARR}.ref.use_torch_compile", None, False, implied=True, note="the trainer decides on compilation"),
    *_fsdp_rules(f"{ARR}.ref.fsdp_config", "reference", ("param_offload",)),
    *_megatron_rules(f"{ARR}.ref.megatron", "reference", train=False),
    *_micro_rules(f"{ARR}.ref", "reference", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size",
                  "infer_batch_size", "reference log-prob micro-batch"),
    Rule(f"{ARR}.ref.log_prob_use_dynamic_bsz", "reference.use_dynamic_bsz", True),
    Rule(f"{ARR}.ref.log_prob_max_token_len_per_gpu", "reference.max_token_len_per_gpu", 8192),
    Rule(f"{ARR}.ref.ulysses_sequence_parallel_size",
         "reference.strategy_args.strategy_config.ulysses_sequence_parallel_size", 2, note="FSDP only"),
    # rollout
    Rule(f"{ARR}.rollout.name", "actor_infer.strategy_args.strategy_name", "sglang", ROLLOUT_ENGINE),
    Rule(f"{ARR}.rollout.temperature", "actor_infer.generating_args.temperature", 0.7),
    Rule(f"{ARR}.rollout.top_k", "actor_infer.generating_args.top_k", 50),
    Rule(f"{ARR}.rollout.top_p", "actor_infer.generating_args.top_p", 0.9),
    Rule(f"{ARR}.rollout.prompt_length", "prompt_length", 333, derived=True,
         note="must equal data.max_prompt_length (verl interpolates it)"),
    Rule(f"{ARR}.rollout.response_length", "actor_infer.generating_args.max_new_tokens", 444, derived=True,
         note="must equal data.max_response_length (verl interpolates it)"),
    Rule(f"{ARR}.rollout.dtype", "actor_infer.model_args.dtype", "float16", to_dtype),
    Rule(f"{ARR}.rollout.gpu_memory_utilization", "actor_infer.strategy_args.strategy_config.gpu_memory_utilization",
         0.45),
    Rule(f"{ARR}.rollout.ignore_eos", "actor_infer.generating_args.ignore_eos", True),
    Rule(f"{ARR}.rollout.enforce_eager", "actor_infer.strategy_args.strategy_config.enforce_eager", False),
    Rule(f"{ARR}.rollout.free_cache_engine", None, False, implied=True,
         note="a colocated engine always frees its KV cache (sleep) while training runs"),
    Rule(f"{ARR}.rollout.load_format", "actor_infer.strategy_args.strategy_config.load_format", "dtensor",
         LOAD_FORMAT, "dummy_* → dummy (weights pushed by the trainer), others → auto"),
    Rule(f"{ARR}.rollout.tensor_model_parallel_size",
         "actor_infer.strategy_args.strategy_config.tensor_parallel_size", 4),
    Rule(f"{ARR}.rollout.max_num_batched_tokens", "actor_infer.strategy_args.strategy_config.max_num_batched_tokens",
         4096),
    Rule(f"{ARR}.rollout.max_num_seqs", "actor_infer.strategy_args.strategy_config.max_num_seqs", 256),
    Rule(f"{ARR}.rollout.max_model_len", "actor_infer.strategy_args.strategy_config.max_model_len", 4096),
    Rule(f"{ARR}.rollout.enable_chunked_prefill",
         "actor_infer.strategy_args.strategy_config.enable_chunked_prefill", False),
    *_micro_rules(f"{ARR}.rollout", "actor_train", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size",
                  "infer_batch_size", "old log-prob micro-batch (computed by actor_train here)"),
    Rule(f"{ARR}.rollout.log_prob_use_dynamic_bsz", "actor_train.use_dynamic_bsz", True),
    Rule(f"{ARR}.rollout.log_prob_max_token_len_per_gpu", "actor_train.max_token_len_per_gpu", 8192),
    Rule(f"{ARR}.rollout.do_sample", "actor_infer.generating_args.do_sample", False),
    Rule(LOG_PROBS, None, True, derived=True,
         note="rollout log-probs are always computed here; verl's rollout correction (rollout_correction, rollout_is*, "
         "tis_imp_ratio_cap) acts only when true, and is imported only then"),
    Rule(f"{ARR}.rollout.n", "num_return_sequences_in_group", 6),
    Rule(f"{ARR}.rollout.disable_log_stats", "actor_infer.strategy_args.strategy_config.disable_log_stats", False),
    Rule(f"{ARR}.rollout.mode", None, "async", implied="sync", note="generation requests are scheduled by "
         "generate_opt_level"),
    Rule(f"{ARR}.rollout.chat_scheduler", None, "my.Scheduler", note=NO_CODE),
    Rule(f"{ARR}.rollout.use_fire_sampling", None, True, implied=False, note="FIRE sampling is not implemented"),
    Rule(f"{ARR}.rollout.engine_kwargs.swap_space", None, 32, note="the engine's default swap space is used"),
    Rule(f"{ARR}.rollout.multi_turn.enable", None, True, derived=True,
         note="true is refused: verl's multi-turn tool and interaction rollouts are not supported here"),
    Rule(f"{ARR}.rollout.multi_turn.max_turns", None, 3, note=MULTI_TURN),
    Rule(f"{ARR}.rollout.multi_turn.tool_config_path", None, "/tools.yaml",
         note=MULTI_TURN),
    Rule(f"{ARR}.rollout.multi_turn.format", None, "hermes", implied="chatml",
         note=MULTI_TURN),
    Rule(f"{ARR}.rollout.val_kwargs.temperature", "validation.generating_args.temperature", 0.6),
    Rule(f"{ARR}.rollout.val_kwargs.top_p", "validation.generating_args.top_p", 0.95),
    Rule(f"{ARR}.rollout.val_kwargs.top_k", "validation.generating_args.top_k", 20),
    Rule(f"{ARR}.rollout.val_kwargs.n", "val_n_sample", 4),
    Rule(f"{ARR}.rollout.val_kwargs.do_sample", "val_greedy", True, _not,
         "inverted: val_greedy = not do_sample (verl evaluates greedily by default)"),
    # critic
    Rule("critic.strategy", "critic.strategy_args.strategy_name", "megatron", TRAIN_STRATEGY,
         "fsdp (FSDP1) runs as FSDP2 here"),
    *_optim_rules("critic.optim", "critic"),
    Rule("critic.model.path", "critic.model_args.model_name_or_path", "/models/critic"),
    Rule("critic.model.tokenizer_path", None, "/models/tok", note="the tokenizer is loaded from the model path"),
    Rule("critic.model.override_config", "critic.model_args.model_config_kwargs", {"attention_dropout": 0.1}),
    Rule("critic.model.external_lib", None, "my_models", note=NO_CODE),
    Rule("critic.model.enable_gradient_checkpointing", "critic.model_args.disable_gradient_checkpointing", False,
         _not, "inverted"),
    Rule("critic.model.use_remove_padding", "critic.use_sequence_packing", True, derived=True,
         note=REMOVE_PADDING + " on the critic"),
    Rule("critic.model.trust_remote_code", "critic.model_args.trust_remote_code", True),
    *_fsdp_rules("critic.model.fsdp_config", "critic", TRAIN_OFFLOAD),
    *_megatron_rules("critic.megatron", "critic", train=True),
    Rule("critic.enable", "critic", True, derived=True,
         note="unset: a critic exists exactly when adv_estimator is gae (as in verl)"),
    Rule("critic.rollout_n", "num_return_sequences_in_group", 6, derived=True,
         note="must equal actor_rollout_ref.rollout.n (verl interpolates it)"),
    Rule("critic.checkpoint.contents", None, ["model"],
         note="checkpoints always hold model, optimizer, scheduler and RNG state"),
    Rule("critic.ppo_mini_batch_size", "critic.training_args.gradient_accumulation_steps", 16, derived=True,
         note="as for the actor: accumulation = mini × n / (micro × dp)"),
    *_micro_rules("critic", "critic", "ppo_micro_batch_size_per_gpu", "ppo_micro_batch_size",
                  "training_args.per_device_train_batch_size", "critic training micro-batch"),
    *_micro_rules("critic", "critic", "forward_micro_batch_size_per_gpu", "forward_micro_batch_size",
                  "infer_batch_size", "value forward micro-batch"),
    Rule("critic.use_dynamic_bsz", "critic.use_dynamic_bsz", True),
    Rule("critic.ppo_max_token_len_per_gpu", "critic.max_token_len_per_gpu", 8192),
    Rule("critic.forward_max_token_len_per_gpu", "critic.max_token_len_per_gpu", 8192),
    Rule("critic.ulysses_sequence_parallel_size", "critic.strategy_args.strategy_config.ulysses_sequence_parallel_size",
         2, note="FSDP only; the data-parallel size becomes GPUs / this"),
    Rule("critic.ppo_epochs", "ppo_epochs", 3, derived=True, note="must equal the actor's ppo_epochs (one value "
         "here)"),
    Rule("critic.shuffle", None, True, implied=False, note="mini-batches are taken in rollout order"),
    Rule("critic.grad_clip", "critic.training_args.max_grad_norm", 0.7),
    Rule("critic.cliprange_value", "value_clip", 0.4),
    # reward model
    Rule("reward_model.enable", "rewards", True, derived=True,
         note="true: rewards.reward_model (reward_type reward_model); false: rewards.math (math_rule)"),
    Rule("reward_model.model.input_tokenizer", None, "/models/rm-tokenizer",
         note="the reward model always re-tokenizes decoded text with its own tokenizer"),
    Rule("reward_model.model.path", "rewards.reward_model.model_args.model_name_or_path", "/models/rm",
         derived=True, note="used when enable"),
    Rule("reward_model.model.external_lib", None, "my_models", note=NO_CODE),
    Rule("reward_model.model.trust_remote_code", "rewards.reward_model.model_args.trust_remote_code", True,
         derived=True, note="used when enable"),
    Rule("reward_model.strategy", None, "megatron", implied="fsdp", note="reward models run forward-only (hf_infer)"),
    Rule("reward_model.model.use_remove_padding", None, True, implied=False,
         note="reward-model batches are padded (packing acts on actor_train, the reference and the critic)"),
    Rule("reward_model.model.fsdp_config.min_num_params", None, 1000, implied=0, note=FSDP2_WRAP),
    Rule("reward_model.model.fsdp_config.wrap_policy.min_num_params", None, 1000, implied=0, note=FSDP2_WRAP),
    Rule("reward_model.model.fsdp_config.reshard_after_forward", None, False, implied=True,
         note="reward models run forward-only (hf_infer)"),
    Rule("reward_model.model.fsdp_config.fsdp_size", None, 4, implied=-1,
         note="reward models run forward-only (hf_infer)"),
    Rule("reward_model.ulysses_sequence_parallel_size", None, 2, implied=1,
         note="reward models run forward-only (hf_infer)"),
    Rule("reward_model.use_dynamic_bsz", None, True, implied=False, note="reward batches have a fixed size"),
    Rule("reward_model.forward_max_token_len_per_gpu", None, 8192, note="reward batches have a fixed size"),
    Rule("reward_model.launch_reward_fn_async", None, True, implied=False, note="rewards are computed in their "
         "own workers"),
    Rule("reward_model.model.fsdp_config.param_offload", None, True, implied=False,
         note="reward models run forward-only without offload"),
    Rule("reward_model.micro_batch_size_per_gpu", "rewards.reward_model.infer_batch_size", 4, derived=True,
         note="used when enable"),
    Rule("reward_model.micro_batch_size", "rewards.reward_model.infer_batch_size", 32, derived=True,
         note="deprecated global micro-batch, divided by dp; used when enable"),
    Rule("reward_model.max_length", "rewards.reward_model.reward_kwargs.max_length", 2048, derived=True,
         note="used when enable"),
    Rule("reward_model.reward_manager", None, "prime", implied="naive",
         note="rewards are computed by the reward workers; there is no parallel (prime) manager"),
    Rule("custom_reward_function.path", None, "/code/reward.py",
         note="reward functions are chosen by name (rewards.*.reward_type); code is never imported"),
    Rule("custom_reward_function.name", None, "compute_score",
         note="reward functions are chosen by name (rewards.*.reward_type); code is never imported"),
    # algorithm
    Rule("algorithm.gamma", "gamma", 0.99),
    Rule("algorithm.lam", "lambd", 0.9),
    Rule("algorithm.adv_estimator", "adv_estimator", "reinforce_plus_plus", ADV_ESTIMATOR),
    Rule("algorithm.norm_adv_by_std_in_grpo", "norm_adv_by_std_in_grpo", False),
    Rule("algorithm.kl_penalty", "kl_penalty", "abs", derived=True,
         note="the KL estimator of the in-reward KL (native kl_penalty serves both KL terms)"),
    Rule("algorithm.use_kl_in_reward", "add_token_level_kl", False, derived=True,
         note="when absent (older verl), KL goes into the reward whenever use_kl_loss is off and kl_coef > 0"),
    Rule("algorithm.kl_ctrl.type", "kl_ctrl_type", "adaptive", KL_CTRL),
    Rule("algorithm.kl_ctrl.kl_coef", "init_kl_coef", 0.02),
    Rule("algorithm.kl_ctrl.horizon", "kl_horizon", 5000),
    Rule("algorithm.kl_ctrl.target_kl", "target_kl", 0.05, derived=True, note="used when kl_ctrl.type is adaptive"),
    # rollout correction (main): IS weights and rejection sampling of pi_old / pi_rollout, as train_infer_correction
    Rule(f"{RC}.rollout_is", f"{MISMATCH}.is_weight", "token", derived=True,
         note="token / sequence → is_weight {weight_type, upper_bound = rollout_is_threshold}: verl's truncated "
         "weight min(rho, threshold) on the policy loss; null: none; with rollout.calculate_log_probs only"),
    Rule(f"{RC}.rollout_is_threshold", f"{MISMATCH}.is_weight.upper_bound", 3.0, derived=True,
         note="the weight's upper bound; also the rejection band's when rollout_rs_threshold is null"),
    Rule(f"{RC}.rollout_rs", f"{MISMATCH}.filters", "geometric", derived=True,
         note="token / sequence / geometric → one filter {agg_type, ratio band [rollout_rs_threshold_lower, "
         "rollout_rs_threshold]}: rejected tokens (or samples) leave the actor's loss; verl also drops them from the "
         "advantages' batch statistics and the critic's loss (a warning says so where that differs)"),
    Rule(f"{RC}.rollout_rs_threshold", f"{MISMATCH}.filters", 1.5, derived=True,
         note="the band's upper bound (null: rollout_is_threshold)"),
    Rule(f"{RC}.rollout_rs_threshold_lower", f"{MISMATCH}.filters", 0.75, derived=True,
         note="the band's lower bound (null: 1 / upper)"),
    Rule(f"{RC}.rollout_token_veto_threshold", None, 1e-4, note=NO_VETO.removeprefix("not imported: ")),
    Rule(f"{RC}.rollout_is_batch_normalize", None, True, implied=False,
         note="the weights are not rescaled to mean 1 over the batch"),
    Rule(f"{RC}.bypass_mode", "use_rollout_log_probs", True, derived=True,
         note="true → use_rollout_log_probs (the PPO ratio is taken against the engine's log-probs: verl's bypass "
         "with its ppo_clip loss); with rollout_is, rollout_rs or a veto it is refused (verl then corrects against "
         "the current policy in every micro-batch, which is not built)"),
    Rule(f"{RC}.use_policy_gradient", None, True, derived=True,
         note="true is refused: verl's REINFORCE loss with rollout IS weights is not built"),
    Rule(f"{RC}.loss_type", None, "reinforce", derived=True,
         note="ppo_clip is the native PPO loss; reinforce is refused (verl's REINFORCE loss with rollout IS weights "
         "is not built)"),
    # rollout importance sampling of the v0.6 releases (flat under algorithm)
    Rule("algorithm.rollout_is_threshold", f"{MISMATCH}.is_weight.upper_bound", 2.0, derived=True,
         note="verl's switch (null: off): the weight's upper bound (truncate) or the band's (mask)"),
    Rule("algorithm.rollout_is", f"{MISMATCH}.is_weight.enabled", True, derived=True,
         note="true: the weights multiply the policy loss; false: verl only logs them (a mask still rejects)"),
    Rule("algorithm.rollout_is_level", f"{MISMATCH}.is_weight.weight_type", "geometric", derived=True,
         note="token / sequence / geometric, the same levels (weight_type and the filter's agg_type)"),
    Rule("algorithm.rollout_is_mode", f"{MISMATCH}.filters", "mask", derived=True,
         note="truncate → the weight clamped at the threshold; mask → a filter with band [threshold_lower, "
         "threshold] (inside it the weight is rho itself, as in verl)"),
    Rule("algorithm.rollout_is_threshold_lower", f"{MISMATCH}.filters", 0.6, derived=True,
         note="mask mode's lower bound (null: 1 / threshold)"),
    Rule("algorithm.rollout_is_veto_threshold", None, 1e-4, note=NO_VETO.removeprefix("not imported: ")),
    # trainer
    Rule("trainer.total_epochs", "max_steps", 3, derived=True,
         note="epochs need the dataset size; max_steps comes from total_training_steps when set"),
    Rule("trainer.total_training_steps", "max_steps", 123),
    Rule("trainer.project_name", "tracker_kwargs.project", "my_project"),
    Rule("trainer.experiment_name", "exp_name", "my_experiment"),
    Rule("trainer.logger", "track_with", ["console", "wandb"], _logger,
         "console → stdout; wandb/swanlab/tensorboard kept (events.jsonl is always written)"),
    Rule("trainer.nnodes", "num_nodes", 2, note="also sizes every role's device_mapping"),
    Rule("trainer.n_gpus_per_node", "num_gpus_per_node", 4, note="also sizes every role's device_mapping"),
    Rule("trainer.save_freq", "save_steps", 20, derived=True, note="-1 (never) keeps only the final checkpoint"),
    Rule("trainer.test_freq", "eval_steps", 5, positive_interval, "-1 disables evaluation"),
    Rule("trainer.critic_warmup", "critic_warmup", 2),
    Rule("trainer.val_before_train", "val_before_train", True),
    Rule("trainer.default_hdfs_dir", None, "hdfs://ckpt", note="checkpoints go to a file-system path "
         "(checkpoint_config.output_dir)"),
    Rule("trainer.default_local_dir", "checkpoint_config.output_dir", "/ckpt/run1"),
    Rule("trainer.resume_mode", "resume_from_checkpoint", "disable", derived=True,
         note="auto → true, disable → false, resume_path → trainer.resume_from_path"),
    Rule("trainer.resume_from_path", "resume_from_checkpoint", "/ckpt/run1/global_step_10", derived=True,
         note="used when resume_mode is resume_path"),
    Rule("trainer.max_actor_ckpt_to_keep", "max_ckpts_to_keep", 3),
    Rule("trainer.max_critic_ckpt_to_keep", "max_ckpts_to_keep", 3),
    Rule("trainer.balance_batch", None, True, implied=False,
         note="micro-batches are not re-balanced by sequence length across ranks"),
    Rule("trainer.log_val_generations", None, 10, implied=0,
         note="evaluation samples are recorded as rollouts events"),
    Rule("trainer.val_generations_to_log_to_wandb", None, 10, implied=0,
         note="older name of log_val_generations; evaluation samples are recorded as rollouts events"),
    Rule("trainer.del_local_ckpt_after_load", None, True, implied=False, note="checkpoints are kept after resuming"),
    Rule("trainer.device", None, "npu", implied="cuda", note="GPU roles run on CUDA (CPU without device_mapping)"),
    Rule("ray_init.num_cpus", None, 16, note="the Ray cluster is started and sized by the platform"),
    Rule("trainer.rollout_data_dir", None, "/dumps/rollouts", note="rollouts are recorded in events.jsonl"),
    Rule("trainer.validation_data_dir", None, "/dumps/val", note="evaluation samples are recorded in events.jsonl"),
    Rule("trainer.ray_wait_register_center_timeout", None, 600, implied=300,
         note="worker start-up is bounded by rpc_timeout"),
]

# verl's own defaults (the values ppo_trainer.yaml documents) where the native default means something else.
DEFAULTS: dict[str, Any] = {
    "data": {"max_prompt_length": 512, "max_response_length": 512, "train_batch_size": 1024, "truncation": "error",
             "prompt_key": "prompt"},
    ARR: {
        "actor": {"strategy": "fsdp", "ppo_mini_batch_size": 256, "clip_ratio": 0.2, "entropy_coeff": 0.001,
                  "use_kl_loss": False, "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "ppo_epochs": 1,
                  "loss_agg_mode": "token-mean",
                  "optim": {"lr": 1e-6, "lr_warmup_steps_ratio": 0.0, "warmup_style": "constant",
                            "weight_decay": 0.01}},
        "rollout": {"name": "vllm", "n": 1, "temperature": 1.0, "top_k": -1, "top_p": 1.0,
                    "tensor_model_parallel_size": 2, "gpu_memory_utilization": 0.5, "do_sample": True},
    },
    "algorithm": {"gamma": 1.0, "lam": 1.0, "adv_estimator": "gae", "kl_penalty": "kl",
                  "kl_ctrl": {"type": "fixed", "kl_coef": 0.005}},
    "trainer": {"nnodes": 1, "n_gpus_per_node": 8, "save_freq": -1, "test_freq": -1, "critic_warmup": 0,
                "logger": ["console"], "val_before_train": True},
}
