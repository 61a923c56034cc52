"""verl (`ppo_trainer.yaml`) -> native schema.

verl counts `ppo_mini_batch_size` in prompts (multiplied by `rollout.n` at run time) and
`ppo_micro_batch_size_per_gpu` in samples per GPU; the native config counts both in samples per
rank: per_device_train_batch_size = micro, gradient_accumulation_steps = mini × n / (micro × dp).
verl's hybrid engine puts actor, rollout and reference (and critic) on all `nnodes × n_gpus_per_node`
devices, taking turns: every role gets that whole device_mapping. With Megatron the data-parallel size
is GPUs / (TP × PP × CP). A critic exists when `critic.enable` is true or, unset, when adv_estimator is
gae. Multi-turn rollouts (`rollout.multi_turn.enable: true`, and verl-agent's `env.max_turn` turns against a
remote environment) are refused: the agentic pipeline plays ROLL environments, not verl's tools, interactions or
remote environments. The DAPO recipe's filter_groups become dynamic
sampling: a std_filter at 0 on every reward (groups whose rewards are all equal) and
is_use_additional_prompts, which draws replacement prompts. verl's rollout correction (main's
`algorithm.rollout_correction`, v0.6's `algorithm.rollout_is*`, v0.5's `actor.tis_imp_ratio_cap`) becomes
train_infer_correction when `rollout.calculate_log_probs` is true, as verl applies it only then; a LoRA
(`lora_rank` > 0) is served by vLLM with enable_lora, and `lora_adapter_path` is the adapter actor_train goes on
training.
"""

from __future__ import annotations

from typing import Any

from trainer.config.importers.common import (
    drop_unused_reference,
    enable_vllm_lora,
    fill_model_paths,
    import_lora,
    import_save_interval,
    settle_strategies,
    warn_unused,
)
from trainer.config.importers.rules import Translation, devices
from trainer.config.importers.verl_correction import bypass, rollout_correction
from trainer.config.importers.verl_rules import (
    ARR,
    DEFAULTS,
    FILTER_METRICS,
    KL_ESTIMATOR,
    NAME,
    REQUIRED,
    RULES,
    SIGNATURE,
    TRAIN_OFFLOAD,
    UNBUILT_RECIPES,
)
from trainer.config.topology import gradient_accumulation

__all__ = ["DEFAULTS", "NAME", "REQUIRED", "RULES", "SIGNATURE", "finish"]


def finish(t: Translation) -> None:
    n = t.int(f"{ARR}.rollout.n", 1)
    total = t.int("trainer.nnodes", 1) * t.int("trainer.n_gpus_per_node", 8)
    enable = t.get("critic.enable")
    has_critic = bool(enable) if enable is not None else t.get("algorithm.adv_estimator") == "gae"
    roles = ["actor_train", "actor_infer", "reference"] + (["critic"] if has_critic else [])
    if not has_critic:
        t.native.pop("critic", None)
        warn_unused(t, "critic", "no critic is created (critic.enable is false, or unset and adv_estimator is not "
                    "gae)")
    _refuse_multi_turn(t)
    _refuse_agent_env(t)
    _refuse_remax(t)
    _refuse_unbuilt_objectives(t)
    if t.native.get("policy_loss", "ppo") == "ppo":  # verl's vanilla loss bounds A < 0 at clip_ratio_c (dual clip)
        t.native["dual_clip_loss"] = True
        t.origin.setdefault("dual_clip_loss", f"{ARR}.actor.clip_ratio_c")
    rollout_n = t.get("critic.rollout_n")
    if has_critic and rollout_n is not None and rollout_n != n:
        t.error("critic.rollout_n", f"{rollout_n} differs from actor_rollout_ref.rollout.n = {n}; verl uses "
                "${actor_rollout_ref.rollout.n} here")
    for role in roles:
        t.native.setdefault(role, {})["device_mapping"] = devices(0, total)
    t.native["actor_infer"].setdefault("strategy_args", {}).setdefault("strategy_name", "vllm")
    for role in ("actor_train", "critic"):
        if role in t.native:
            t.native[role].setdefault("strategy_args", {}).setdefault("strategy_name", "fsdp2_train")
    train_name = t.native["actor_train"]["strategy_args"]["strategy_name"]
    ref = t.native["reference"].setdefault("strategy_args", {})
    ref.setdefault("strategy_name", "megatron_infer" if train_name == "megatron_train" else "fsdp2_infer")
    if "critic" in t.native and t.get("critic.strategy") is None:
        t.native["critic"]["strategy_args"]["strategy_name"] = train_name
    _offload(t, f"{ARR}.actor.fsdp_config", "actor_train", TRAIN_OFFLOAD)
    _offload(t, f"{ARR}.ref.fsdp_config", "reference", ("param_offload",))
    _offload(t, "critic.model.fsdp_config", "critic", TRAIN_OFFLOAD)
    _lengths(t)
    _micro_batches(t, total)
    for role, src in (("actor_train", f"{ARR}.actor"), ("critic", "critic")):
        if role in t.native:
            _optimizer_steps(t, role, src, n, _dp(t, role, total))
    for role, src in (("actor_train", f"{ARR}.actor.optim"), ("critic", "critic.optim")):
        if role in t.native:
            _megatron_optimizer(t, role, src)
    import_lora(t, f"{ARR}.model", rank="lora_rank", alpha="lora_alpha", targets="target_modules")
    _lora_adapter(t)
    enable_vllm_lora(t, f"{ARR}.model.lora_rank", megatron=train_name == "megatron_train")
    _kl(t)
    _kl_target(t)
    _sequence_parallel(t)
    _remove_padding(t)
    bypass(t)
    rollout_correction(t, has_critic)
    _rewards(t, total)
    _dapo(t)
    _schedule(t)
    _validation(t)
    if not t.has(f"{ARR}.model.path"):  # verl-recipe's async_grpo leaves it null for its run script to set
        t.required(f"{ARR}.model.path", "the policy model: actor, rollout and reference load it", "/path/to/model")
    fill_model_paths(t, ("actor_train", "actor_infer", "reference", "critic"))
    drop_unused_reference(t)
    settle_strategies(t)


def _offload(t: Translation, src: str, role: str, keys: tuple[str, ...]) -> None:
    chosen = [key for key in keys if t.written(f"{src}.{key}")] or [key for key in keys if t.has(f"{src}.{key}")]
    values = {key: bool(t.get(f"{src}.{key}")) for key in chosen}
    if not values or role not in t.native:
        return
    offload = any(values.values())
    if len(set(values.values())) > 1:
        t.warn(f"{src}.{next(k for k, v in values.items() if v != offload)}",
               f"FSDP2 offloads parameters, gradients and optimizer state together; cpu_offload = {offload}")
    t.set(f"{role}.strategy_args.strategy_config.cpu_offload", offload, f"{src}.{next(iter(values))}")


def _lengths(t: Translation) -> None:
    for key, data_key in (("prompt_length", "max_prompt_length"), ("response_length", "max_response_length")):
        value, expected = t.get(f"{ARR}.rollout.{key}"), t.get(f"data.{data_key}")
        if value is not None and value != expected:
            t.error(f"{ARR}.rollout.{key}", f"{value} differs from data.{data_key} = {expected}; verl uses "
                    f"${{data.{data_key}}} here, set it to {expected}")


def _dp(t: Translation, role: str, total: int) -> int:
    """verl's data-parallel size: GPUs / Ulysses sequence-parallel size (FSDP), GPUs / (TP × PP × CP) (Megatron)."""
    args = t.native.get(role, {}).get("strategy_args", {})
    cfg = args.get("strategy_config", {})
    if str(args.get("strategy_name", "")).startswith("megatron"):
        split = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            split *= int(cfg.get(key) or 1)
        return max(1, total // split)
    return max(1, total // int(cfg.get("ulysses_sequence_parallel_size", 1)))


def _kl_target(t: Translation) -> None:
    path = "algorithm.kl_ctrl.target_kl"
    if t.get("algorithm.kl_ctrl.type") == "adaptive" and t.has(path):
        t.set("target_kl", t.float(path), path)
    elif t.written(path):
        t.warn(path, f"= {t.get(path)} not imported: used only when kl_ctrl.type is adaptive")


def _sequence_parallel(t: Translation) -> None:
    """verl switches Megatron sequence parallelism off when TP is 1; so does the import (unless the file chose it)."""
    for role, src in (("actor_train", f"{ARR}.actor"), ("reference", f"{ARR}.ref"), ("critic", "critic")):
        cfg = t.native.get(role, {}).get("strategy_args", {}).get("strategy_config", {})
        tp_one = int(cfg.get("tensor_model_parallel_size") or 1) == 1
        if cfg.get("sequence_parallel") and tp_one and not t.written(f"{src}.megatron.sequence_parallel"):
            cfg.pop("sequence_parallel")


def _refuse_multi_turn(t: Translation) -> None:
    path = f"{ARR}.rollout.multi_turn.enable"
    if t.get(path):
        t.error(path, "true is refused: verl's multi-turn rollouts (tool calls, interactions) are not supported (the "
                "agentic pipeline plays ROLL environments: train_env_manager, custom_envs), and running this config "
                "single-turn would train something else; for a single-turn task, use the override "
                f"{path}=false")


def _refuse_agent_env(t: Translation) -> None:
    """verl-agent's `env` section: a multi-turn agent loop against a remote environment server (env.max_turn turns)."""
    if t.has("env.max_turn"):
        t.error("env.max_turn", f"= {t.get('env.max_turn')!r} is refused: verl-agent's multi-turn rollouts against a "
                "remote environment (env.environment_endpoint) are not supported (the agentic pipeline plays ROLL "
                "environments: train_env_manager, custom_envs), and running this config single-turn would train "
                "something else; to train single-turn on the file's prompts with its rule reward, remove the section "
                "with the override ~env")


def _refuse_remax(t: Translation) -> None:
    """ReMax subtracts the reward of a greedy rollout per prompt, which the RLVR pipeline does not generate."""
    if t.get("algorithm.adv_estimator") == "remax":
        t.error("algorithm.adv_estimator", "= 'remax' is refused: ReMax's baseline, a greedy rollout per prompt, is not "
                "generated here, and another estimator trains something else; to train this file with REINFORCE++ "
                "(batch-normalised returns, no baseline rollout), use the override "
                "algorithm.adv_estimator=reinforce_plus_plus")


def _refuse_unbuilt_objectives(t: Translation) -> None:
    """A recipe key that selects an objective, estimator or trained component PolicyLab does not build: the file
    would train something else, so it is refused, naming the override that trains the nearest built thing and
    what that is (UNBUILT_RECIPES). The override's own value (`reward_model.enable=false`) lifts the refusal, and so
    does a falsy value of the key itself (`qat.enable: false`)."""
    for key, recipe in UNBUILT_RECIPES.items():
        target, _, value = recipe.override.lstrip("~").partition("=")
        if not t.get(key) or (value and str(t.get(target)).lower() == value):
            continue  # unset, or set to nothing (false, 0, null): the recipe is off
        t.error(key, f"= {t.get(key)!r} is refused: {recipe.what} is not built, and running this file without it "
                f"would train something else; the nearest built recipe is {recipe.nearest}: override {recipe.override}")


def _megatron_optimizer(t: Translation, role: str, src: str) -> None:
    """Megatron optimizer keys that need arithmetic: betas, and min_lr as a fraction of lr."""
    ta = t.native[role].setdefault("training_args", {})
    betas = t.get(f"{src}.betas")
    if betas is not None:
        if not (isinstance(betas, list | tuple) and len(betas) == 2):
            t.error(f"{src}.betas", f"{betas!r} must be a list of two numbers, e.g. [0.9, 0.999]")
        else:
            ta["adam_beta1"], ta["adam_beta2"] = float(betas[0]), float(betas[1])
    if t.written(f"{src}.min_lr"):
        lr = t.float(f"{src}.lr", 1e-6)
        ratio = t.float(f"{src}.min_lr") / lr if lr else -1.0
        if not 0 <= ratio <= 1:
            t.error(f"{src}.min_lr", f"{t.get(f'{src}.min_lr')} must lie between 0 and {src}.lr = {lr}")
        else:
            t.set(f"{role}.training_args.min_lr_ratio", ratio, f"{src}.min_lr")


DAPO_UNBOUNDED_BATCHES = 3  # replacement prompts per step, in train batches, for max_num_gen_batches 0


def _dapo(t: Translation) -> None:
    """DAPO's dynamic sampling: filter_groups drops groups whose metric has no spread and generates more
    prompts (gen_batch_size at a time, at most max_num_gen_batches batches) until train_batch_size groups
    pass. Here: a std_filter at 0 on every reward, is_use_additional_prompts, and a budget of
    max_num_gen_batches × gen_batch_size − train_batch_size extra prompts per step."""
    gen, train = t.get("data.gen_batch_size"), t.get("data.train_batch_size")
    if not t.get("algorithm.filter_groups.enable"):
        if gen is not None and gen != train:
            t.warn("data.gen_batch_size", f"= {gen} not imported: filter_groups is off; each step samples "
                   f"data.train_batch_size = {train} prompts")
        for key in ("metric", "max_num_gen_batches"):
            if t.written(f"algorithm.filter_groups.{key}"):
                t.warn(f"algorithm.filter_groups.{key}", "not imported: filter_groups.enable is false")
        return
    metric = t.get("algorithm.filter_groups.metric", "acc")
    if metric not in FILTER_METRICS:
        t.error("algorithm.filter_groups.metric", f"{metric!r}: groups are filtered on the sequence reward here; "
                f"valid: {', '.join(FILTER_METRICS)}")
        return
    t.set("is_use_additional_prompts", True, "algorithm.filter_groups.enable")
    for name in t.native.get("rewards", {}):
        t.set(f"rewards.{name}.query_filter_config", {"type": "std_filter", "filter_args": {"std_threshold": 0.0}},
              "algorithm.filter_groups.metric")
    batches = t.get("algorithm.filter_groups.max_num_gen_batches", 0) or 0
    if train is not None:
        budget = max(0, batches * (gen or train) - train) if batches > 0 else DAPO_UNBOUNDED_BATCHES * train
        t.set("max_additional_running_prompts", budget, "algorithm.filter_groups.max_num_gen_batches")
        if batches <= 0:
            t.warn("algorithm.filter_groups.max_num_gen_batches", f"0 (unbounded in DAPO): a step draws at most "
                   f"{budget} replacement prompts (max_additional_running_prompts)")


def _micro_batches(t: Translation, total: int) -> None:
    """Per-GPU micro-batches are taken as they are; deprecated global ones are divided by dp."""
    for rule in RULES:
        if not (rule.derived and rule.target and rule.target.endswith(("per_device_train_batch_size",
                                                                        "infer_batch_size"))):
            continue
        if not t.has(rule.source) or rule.source.startswith("reward_model."):
            continue
        role = rule.target.split(".")[0]
        if role not in t.native:
            continue
        value = t.int(rule.source)
        dp = _dp(t, role, total)
        if not rule.source.endswith("_per_gpu"):
            if t.has(f"{rule.source}_per_gpu"):
                t.warn(rule.source, f"ignored: {rule.source}_per_gpu is set and takes precedence")
                continue
            if value % dp:
                t.error(rule.source, f"{value} (a global micro-batch) is not divisible by the {dp} data-parallel "
                        f"ranks; set the per-GPU size instead, e.g. with the override "
                        f"{rule.source}_per_gpu={max(1, value // dp)}")
                continue
            value //= dp
        t.set(rule.target, value, rule.source)


def _optimizer_steps(t: Translation, role: str, src: str, n: int, dp: int) -> None:
    """gradient_accumulation_steps from verl's mini-batch (prompts) and per-GPU micro-batch (samples)."""
    train_batch = t.int("data.train_batch_size", 1024)
    path = f"{src}.ppo_mini_batch_size"
    if not t.has(path):
        if role != "critic":
            return
        path = f"{ARR}.actor.ppo_mini_batch_size"  # verl: ${actor_rollout_ref.actor.ppo_mini_batch_size}
    mini = t.int(path, 256)
    if mini <= 0 or train_batch % mini:
        t.error(path, f"{mini} must divide data.train_batch_size = {train_batch} (verl splits each batch into "
                f"mini-batches); use a divisor of {train_batch}")
        return
    micro_path = f"{role}.training_args.per_device_train_batch_size"
    micro = t.native.get(role, {}).get("training_args", {}).get("per_device_train_batch_size")
    if micro is None:
        if t.get(f"{src}.use_dynamic_bsz"):
            micro = 1
            t.set(micro_path, 1, path)
        else:
            t.required(f"{src}.ppo_micro_batch_size_per_gpu", "verl refuses a config without a micro-batch size "
                       "unless use_dynamic_bsz", 4)
            return
    samples = mini * n
    accumulation = gradient_accumulation(samples, micro, dp)
    if accumulation is None:
        t.error(path, f"ppo_mini_batch_size × rollout.n = {mini} × {n} = {samples} samples is not divisible by "
                f"micro-batch × GPUs = {micro} × {dp}; verl requires mini × n / GPUs to be a multiple of "
                "ppo_micro_batch_size_per_gpu")
        return
    t.set(f"{role}.training_args.gradient_accumulation_steps", accumulation, path)
    if role == "critic" and t.has("critic.ppo_epochs"):
        actor_epochs = t.get(f"{ARR}.actor.ppo_epochs", 1)
        if t.get("critic.ppo_epochs") != actor_epochs:
            t.warn("critic.ppo_epochs", f"= {t.get('critic.ppo_epochs')} not imported: one ppo_epochs serves both "
                   f"roles here; kept the actor's {actor_epochs}")


def _remove_padding(t: Translation) -> None:
    """verl's use_remove_padding (unpadded sequences through flash-attention's varlen kernels) is our
    sequence packing: the model section's key covers actor_train and the reference (the actor's own key,
    where a release has it, actor_train), critic.model's the critic."""
    model_key = f"{ARR}.model.use_remove_padding"
    for role, keys in (("actor_train", (model_key, f"{ARR}.actor.use_remove_padding")), ("reference", (model_key,)),
                       ("critic", ("critic.model.use_remove_padding",))):
        key = next((k for k in keys if t.get(k)), None)
        if key is not None and role in t.native:
            t.set(f"{role}.use_sequence_packing", True, key)


def _kl(t: Translation) -> None:
    use_loss = bool(t.get(f"{ARR}.actor.use_kl_loss"))
    coef = t.float("algorithm.kl_ctrl.kl_coef", 0.005)
    in_reward = bool(t.get("algorithm.use_kl_in_reward")) if t.has("algorithm.use_kl_in_reward") else (
        not use_loss and coef > 0)
    t.native["add_token_level_kl"] = in_reward
    t.origin.setdefault("add_token_level_kl", "algorithm.use_kl_in_reward")
    if in_reward and not t.has("algorithm.use_kl_in_reward"):
        t.warn("algorithm.use_kl_in_reward", f"unset: KL goes into the reward (kl_coef {coef}) because use_kl_loss is "
               "off, as in verl before use_kl_in_reward existed; set it to false to train without KL")
    loss_est, reward_est = t.get(f"{ARR}.actor.kl_loss_type", "low_var_kl"), t.get("algorithm.kl_penalty", "kl")
    try:
        if use_loss:
            t.native["kl_penalty"] = KL_ESTIMATOR(loss_est)
            if in_reward and KL_ESTIMATOR(reward_est) != t.native["kl_penalty"]:
                t.warn("algorithm.kl_penalty", f"= {reward_est!r} not imported: one KL estimator serves both KL "
                       f"terms here; kept kl_loss_type {loss_est!r}")
            elif not in_reward and t.written("algorithm.kl_penalty"):
                t.warn("algorithm.kl_penalty", f"= {reward_est!r} not imported: KL is not in the reward")
        else:
            t.native["kl_penalty"] = KL_ESTIMATOR(reward_est)
            if t.written(f"{ARR}.actor.kl_loss_type"):
                t.warn(f"{ARR}.actor.kl_loss_type", f"= {loss_est!r} not imported: use_kl_loss is false")
    except ValueError as exc:
        t.error("algorithm.kl_penalty" if not use_loss else f"{ARR}.actor.kl_loss_type", str(exc))


def _rewards(t: Translation, dp: int) -> None:
    if t.get("reward_model.enable"):
        section: dict[str, Any] = {"reward_type": "reward_model",
                                   "model_args": {"model_name_or_path": t.get("reward_model.model.path")},
                                   "device_mapping": devices(0, dp)}
        if t.has("reward_model.model.trust_remote_code"):
            section["model_args"]["trust_remote_code"] = t.get("reward_model.model.trust_remote_code")
        micro = t.get("reward_model.micro_batch_size_per_gpu")
        if micro is None and t.has("reward_model.micro_batch_size"):
            micro = max(1, t.int("reward_model.micro_batch_size") // dp)
        if micro is not None:
            section["infer_batch_size"] = micro
        if t.has("reward_model.max_length"):
            section["reward_kwargs"] = {"max_length": t.get("reward_model.max_length")}
        t.native["rewards"] = {"reward_model": section}
        if not t.has("reward_model.model.path"):
            t.required("reward_model.model.path", "reward_model.enable is true", "/path/to/reward_model")
        return
    t.native["rewards"] = {"math": {"reward_type": "math_rule"}}
    for key in ("model.path", "micro_batch_size_per_gpu", "micro_batch_size", "max_length",
                "model.trust_remote_code"):
        if t.written(f"reward_model.{key}"):
            t.warn(f"reward_model.{key}", "not imported: reward_model.enable is false (rule-based reward)")
    # verl's reward manager reads the answer from each row's reward_model.ground_truth (a struct column)
    t.native["actor_train"].setdefault("data_args", {}).setdefault("response", "reward_model.ground_truth")
    t.warn("rewards.math", "verl picks a rule-based score function by data_source; imported as math_rule, which "
           "checks the answer in reward_model.ground_truth (actor_train.data_args.response)")


def _schedule(t: Translation) -> None:
    if t.has("trainer.total_training_steps"):
        if t.written("trainer.total_epochs"):
            t.warn("trainer.total_epochs", f"= {t.get('trainer.total_epochs')} not imported: superseded by "
                   "trainer.total_training_steps (max_steps), as in verl")
    elif t.has("trainer.total_epochs"):
        t.warn("trainer.total_epochs", f"= {t.get('trainer.total_epochs')} not imported: the number of steps per "
               "epoch depends on the dataset size; set max_steps (or trainer.total_training_steps)")
    import_save_interval(t, "trainer.save_freq")
    mode = t.get("trainer.resume_mode")
    if mode is not None:
        table = {"auto": True, "disable": False, "resume_path": t.get("trainer.resume_from_path")}
        if mode not in table:
            t.error("trainer.resume_mode", f"{mode!r} is not a verl resume mode; valid: auto, disable, resume_path")
        elif mode == "resume_path" and not t.has("trainer.resume_from_path"):
            t.required("trainer.resume_from_path", "resume_mode is resume_path", "/path/to/global_step_N")
        else:
            t.set("resume_from_checkpoint", table[mode], "trainer.resume_mode")
    elif t.has("trainer.resume_from_path"):
        t.warn("trainer.resume_from_path", "not imported: used only when resume_mode is resume_path")


def _validation(t: Translation) -> None:
    """verl evaluates with the rollout's settings but greedy (do_sample false): val_greedy."""
    section = t.native.get("validation")
    if not section:
        for key in ("data.validation_shuffle", "data.val_max_samples"):
            if t.written(key):
                t.warn(key, f"= {t.get(key)!r} not imported: no data.val_files, so there is no validation section")
        return
    data = section.setdefault("data_args", {})
    for key, value in (t.native["actor_train"].get("data_args") or {}).items():
        if key not in ("file_name", "shuffle", "max_samples"):
            data.setdefault(key, value)
    if t.has("data.validation_shuffle"):
        data["shuffle"] = bool(t.get("data.validation_shuffle"))
    limit = t.int("data.val_max_samples") if t.has("data.val_max_samples") else 0
    if limit > 0:
        data["max_samples"] = limit
    t.native.setdefault("val_greedy", True)


def _lora_adapter(t: Translation) -> None:
    """verl's model.lora_adapter_path: a PEFT LoRA folder loaded as trainable onto the actor (the rollout serves it,
    the reference is the actor with its adapter disabled: the base). Native adapter_name_or_path continues it as the
    LoRA the config trains (preflight checks its rank, alpha and targets against lora_*), so a LoRA must be on."""
    path = f"{ARR}.model.lora_adapter_path"
    adapter = t.get(path)
    if adapter is None:
        return
    if (t.get(f"{ARR}.model.lora_rank") or 0) <= 0:
        t.error(path, "needs lora_rank > 0 here: the adapter is trained on as the LoRA the config describes, and "
                "preflight checks lora_rank, lora_alpha and target_modules against it (verl reads them from the "
                f"adapter); to run this file, set the adapter's rank, e.g. with the override {ARR}.model.lora_rank=16")
        return
    t.set("actor_train.model_args.adapter_name_or_path", str(adapter), path)
