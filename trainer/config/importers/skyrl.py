"""SkyRL (skyrl-train `ppo_base_config`) -> native schema.

SkyRL counts `policy_mini_batch_size` in prompts (× `n_samples_per_prompt` samples) and
`micro_train_batch_size_per_gpu` in samples: gradient_accumulation_steps = mini × n / (micro × dp).
`trainer.placement` becomes device_mapping: with `colocate_all` every role shares the policy's
devices; otherwise policy, reference (unless colocate_policy_ref), critic and the inference engines
get consecutive blocks of devices.
"""

from __future__ import annotations

import math
from typing import Any

from trainer.config.importers.common import (
    drop_unused_reference,
    fill_model_paths,
    fit_to_model,
    import_save_interval,
    positive_interval,
    settle_strategies,
    warn_unused,
)
from trainer.config.importers.rules import Rule, Translation, choice, devices, to_dtype
from trainer.config.schema import DeepSpeedConfig

NAME = "skyrl"
SIGNATURE = ("trainer", "generator", "data")
REQUIRED = ("trainer", "generator")

T = "trainer"
G = "generator"
ALG = f"{T}.algorithm"
PL = f"{T}.placement"
STRATEGY = choice({"fsdp": "fsdp2_train", "fsdp2": "fsdp2_train", "deepspeed": "deepspeed_train"}, "strategy")
FORWARD = {"fsdp2_train": "fsdp2_infer", "deepspeed_train": "deepspeed_infer"}
ADV = choice({"grpo": "grpo", "gae": "gae", "rloo": "rloo", "reinforce++": "reinforce_plus_plus",
              "reinforce_plus_plus": "reinforce_plus_plus"}, "advantage_estimator")
LOSS_TYPE = choice({"regular": False, "dual_clip": True}, "ppo_loss_type")
ENGINE = choice({"vllm": "vllm", "sglang": "sglang"}, "backend")
RESUME = ("none", "latest", "from_path")
NO_DEBUG = "a debugging aid of SkyRL with no native counterpart"


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
            Rule(f"{src}.model.path", "pretrain" if role == "actor_train" else f"{role}.model_args.model_name_or_path",
                 "/models/m", note="the policy model also loads into actor_infer and reference"
                 if role == "actor_train" else "a critic is created when this is set"),
        ]
    if role == "actor_train":
        rules += [
            Rule(f"{src}.use_torch_compile", None, True, implied=False, note="entropy is computed eagerly"),
            Rule(f"{src}.record_memory", None, True, implied=False, note=NO_DEBUG),
        ]
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
    Rule("deepspeed_config", None, {"train": {"zero_optimization": {"stage": 3}}}, derived=True,
         note="templates that trainer.*.deepspeed_config reference; their values arrive through them"),
    # algorithm
    Rule(f"{ALG}.advantage_estimator", "adv_estimator", "gae", ADV),
    Rule(f"{ALG}.use_kl_estimator_k3", "kl_penalty", False, derived=True,
         note="true → low_var_kl; else use_abs_kl true → abs; else kl"),
    Rule(f"{ALG}.use_abs_kl", "kl_penalty", True, derived=True, note="see use_kl_estimator_k3"),
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
    Rule(f"{G}.batched", "generate_opt_level", False, _batched,
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
    Rule(f"{G}.max_turns", None, 3, implied=1, note="multi-turn generation is not part of the RLVR pipeline"),
    Rule(f"{G}.override_existing_update_group", None, "enable", implied="auto",
         note="applies to remote engines only"),
    Rule(f"{G}.sampling_params.max_generate_length", "response_length", 555,
         note="also actor_infer.generating_args.max_new_tokens (unset means response_length)"),
    Rule(f"{G}.sampling_params.temperature", "actor_infer.generating_args.temperature", 0.7),
    Rule(f"{G}.sampling_params.top_p", "actor_infer.generating_args.top_p", 0.9),
    Rule(f"{G}.sampling_params.min_p", "actor_infer.generating_args.min_p", 0.05),
    Rule(f"{G}.sampling_params.top_k", "actor_infer.generating_args.top_k", 40),
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
        "algorithm": {"advantage_estimator": "grpo", "use_kl_estimator_k3": True, "use_abs_kl": False,
                      "use_kl_in_reward": False, "use_kl_loss": True, "kl_loss_coef": 0.001,
                      "advantage_batch_normalize": False, "ppo_loss_type": "regular", "lambd": 1.0, "gamma": 1.0,
                      "eps_clip_low": 0.2, "eps_clip_high": 0.2, "clip_ratio_c": 3.0},
        "policy": {"optimizer_config": {"lr": 1e-6, "adam_betas": [0.9, 0.999], "weight_decay": 1e-2,
                                        "max_grad_norm": 1.0}},
    },
    G: {"backend": "vllm", "num_inference_engines": 1, "inference_engine_tensor_parallel_size": 4,
        "n_samples_per_prompt": 5, "run_engines_locally": True,
        "sampling_params": {"max_generate_length": 1024, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0,
                            "top_k": -1}},
}


def finish(t: Translation) -> None:
    _kl(t)
    has_critic = t.has(f"{T}.critic.model.path")
    if not has_critic:
        t.native.pop("critic", None)
        why = "no critic is created (trainer.critic.model.path is unset)"
        for prefix in (f"{T}.critic", f"{T}.critic_mini_batch_size", f"{PL}.critic_num_nodes",
                       f"{PL}.critic_num_gpus_per_node"):
            warn_unused(t, prefix, why)
        if t.get(f"{ALG}.advantage_estimator") == "gae":
            t.error(f"{T}.critic.model.path", "advantage_estimator gae needs a critic model; set its path")
    _strategies(t, has_critic)
    _placement(t, has_critic)
    _batches(t, has_critic)
    _schedule(t)
    _generation(t)
    t.native["rewards"] = {"math": {"reward_type": "math_rule"}}
    if t.written("deepspeed_config") and t.get(f"{T}.strategy") != "deepspeed":
        warn_unused(t, "deepspeed_config", "DeepSpeed templates are used only when trainer.strategy is deepspeed")
    if t.has("data.val_data"):
        val = t.native.setdefault("validation", {})
        val.setdefault("generating_args", {})
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
    if t.get(f"{ALG}.use_kl_estimator_k3"):
        estimator = "low_var_kl"
        if t.get(f"{ALG}.use_abs_kl"):
            t.warn(f"{ALG}.use_abs_kl", "= True not imported: use_kl_estimator_k3 takes precedence, as in SkyRL")
    elif t.get(f"{ALG}.use_abs_kl"):
        estimator = "abs"
    else:
        estimator = "kl"
    t.native["kl_penalty"] = estimator


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
    tp = t.int(f"{G}.inference_engine_tensor_parallel_size", 1)
    engines = t.int(f"{G}.num_inference_engines", 1)
    nodes, per_node = _block(t, "policy")
    policy = nodes * per_node
    engine_devices = engines * tp
    widest = max(per_node, tp)
    if not t.get(f"{G}.run_engines_locally", True):
        t.error(f"{G}.run_engines_locally", "false (remote inference engines) is not supported; engines run "
                "inside the cluster")
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
            t.error(f"{G}.num_inference_engines", f"with colocate_all, num_inference_engines × "
                    f"inference_engine_tensor_parallel_size = {engines} × {tp} = {engine_devices} must equal the "
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
        sp = int(section.get("strategy_args", {}).get("strategy_config", {}).get("ulysses_sequence_parallel_size", 1))
        dp = max(1, len(section.get("device_mapping") or [0]) // sp)
        if mini <= 0 or train_batch % mini:
            t.error(path, f"{mini} must divide trainer.train_batch_size = {train_batch} (SkyRL takes whole "
                    "mini-batches from each batch)")
            continue
        samples = mini * n
        if samples % (micro * dp):
            t.error(path, f"{src}_mini_batch_size × n_samples_per_prompt = {mini} × {n} = {samples} samples is not "
                    f"divisible by micro_train_batch_size_per_gpu × dp = {micro} × {dp} (SkyRL's "
                    "validate_batch_sizes refuses it)")
            continue
        t.native.setdefault(role, {}).setdefault("training_args", {})["gradient_accumulation_steps"] = (
            samples // (micro * dp))


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
    if t.written(f"{G}.remote_inference_engine_urls"):
        warn_unused(t, f"{G}.remote_inference_engine_urls", "remote inference engines are not supported")
