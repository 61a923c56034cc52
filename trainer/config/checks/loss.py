"""The algorithm and the policy loss: estimators, clips, loss variants and the train-inference correction."""

from __future__ import annotations

from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.schema import PipelineConfig
from trainer.config.topology import roles, strategy_name, train_shape

# knobs only the learner reads: a rollout-only run (pipeline_mode rollout_only) builds none of it
TRAINING_ONLY = ("adv_estimator", "ppo_epochs", "critic", "reference", "use_kl_loss", "add_token_level_kl",
                 "init_kl_coef", "pg_clip", "entropy_loss_coef", "reward_normalization", "loss_agg_mode")


def check_algorithm(config: PipelineConfig) -> list[ConfigIssue]:
    if config.pipeline_mode == "rollout_only":
        return rollout_only_issues(config)
    issues = []
    if config.adv_estimator == "gae" and config.critic is None:
        issues.append(error("critic", "adv_estimator gae needs a critic section (a value model); without one, "
                            "REINFORCE++ is the nearest built estimator: override adv_estimator=reinforce_plus_plus"))
    if config.critic is not None and config.adv_estimator != "gae":
        issues.append(warning("critic", f"unused: adv_estimator {config.adv_estimator} does not use a value model"))
    if config.use_kl_loss and config.add_token_level_kl:
        issues.append(
            warning("use_kl_loss", "KL is applied twice (in the reward and as a loss); usually only one is wanted")
        )
    if (config.use_kl_loss or config.add_token_level_kl) and config.reference is None:
        issues.append(error("reference", "KL (use_kl_loss / add_token_level_kl) needs a reference section"))
    if config.kl_ctrl_type == "adaptive" and config.target_kl is None:
        issues.append(error("target_kl", "kl_ctrl_type adaptive needs a target_kl to steer toward"))
    if config.kl_ctrl_type == "fixed" and config.target_kl is not None:
        issues.append(
            warning("target_kl", "unused: kl_ctrl_type fixed keeps init_kl_coef (set kl_ctrl_type: adaptive)")
        )
    elif (config.kl_ctrl_type == "adaptive" or config.target_kl is not None) and not config.add_token_level_kl:
        issues.append(warning("target_kl", "unused: the KL controller only sets the KL penalty in the reward, "
                              "and add_token_level_kl is off"))
    issues += _policy_loss_issues(config)
    return issues


def rollout_only_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """A rollout-only run (ROLL's AgenticRolloutPipeline, decision 0062) plays and never trains: gae needs no
    critic there, and every training-only knob the file sets is a warning. The mode itself is said too: a
    native agentic file that leaves actor_train out (ROLL's sign of its rollout pipeline) would otherwise not train
    without a word."""
    said = warning("pipeline_mode", "rollout_only (set, or an agentic config without an actor_train section): "
                   "actor_infer plays and records trajectories and nothing trains; to train, add actor_train and "
                   "set pipeline_mode: train")
    issues = [said] + [warning(name, "has no effect in a rollout-only run (pipeline_mode rollout_only: actor_infer plays "
                      "and records trajectories, nothing trains)")
              for name in TRAINING_ONLY if name in config.model_fields_set]
    if config.train_env_manager is None:
        issues.append(error("pipeline_mode", "rollout_only plays train_env_manager's environments, and this "
                            "config has none (set train_env_manager, or override pipeline_mode=train)"))
    return issues


PG_VARIANTS_BUILT = ("ppo", "topr")  # ROLL's pg_variant values this build runs (tis, cispo, kimi15 are not)
TOPR_WEIGHTS = ("topr_positive_weight", "topr_negative_weight")


def _policy_loss_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """GSPO clips a sequence-level ratio that stays near 1: PPO's clip range hardly ever binds. ROLL's
    pg_variant picks the objective on actor_train only; TOPR's two spellings exclude each other."""
    issues = []
    variant = config.actor_train.pg_variant
    if variant == "topr" and config.use_topr_loss:
        issues.append(error("actor_train.pg_variant", "topr (per-token ratios) and use_topr_loss (the sequence-level "
                            "reading) are two TOPR objectives; choose one"))
    if variant == "topr" and config.policy_loss != "ppo":
        issues.append(error("actor_train.pg_variant", f"topr replaces the policy objective; policy_loss "
                            f"{config.policy_loss} would not run (set policy_loss: ppo or drop pg_variant)"))
    if config.use_policy_loss_type == "PG":
        rival = ("use_topr_loss: true" if config.use_topr_loss else "actor_train.pg_variant: topr" if variant == "topr"
                 else f"policy_loss: {config.policy_loss}" if config.policy_loss != "ppo" else None)
        if rival:
            issues.append(error("use_policy_loss_type", f"PG (-A * log pi) replaces the policy objective; {rival} "
                                "names another one; choose one (use_policy_loss_type: PPO keeps the others)"))
        issues += [warning(name, "has no effect: use_policy_loss_type PG has no ratio to clip")
                   for name in ("pg_clip", "pg_clip_low", "pg_clip_high") if name in config.model_fields_set]
        steps = train_shape(config, "actor_train").optimizer_steps_per_rollout
        if steps > 1:
            issues.append(warning("use_policy_loss_type", f"PG takes {steps} optimizer steps on each rollout "
                                  "(ppo_epochs x mini-batches) without a ratio to pi_old: the steps after the first "
                                  "are off-policy and uncorrected (PPO's ratio and clip bound them)"))
    if variant != "topr":
        issues += [warning(f"actor_train.{name}", "has no effect: only actor_train.pg_variant: topr reads it")
                   for name in TOPR_WEIGHTS if getattr(config.actor_train, name) != 1.0]
    for role, worker in roles(config).items():
        if role != "actor_train":
            issues += [warning(f"{role}.{name}", "has no effect: the policy objective is actor_train's")
                       for name in ("pg_variant", *TOPR_WEIGHTS) if name in worker.model_fields_set]
    loss = ("topr" if config.use_topr_loss else "topr_token" if variant == "topr"
            else "pg" if config.use_policy_loss_type == "PG" else config.policy_loss)
    clip_low, clip_high = config.clip_range()
    if loss == "gspo" and max(clip_low, clip_high) > 0.01:
        issues.append(warning("pg_clip", f"policy_loss gspo clips the sequence ratio at 1 - {clip_low} / "
                              f"1 + {clip_high}, which it rarely reaches; the GSPO paper uses "
                              "pg_clip_low: 3.0e-4, pg_clip_high: 4.0e-4"))
    if loss != "ppo" and config.dual_clip_loss:
        issues.append(warning("dual_clip_loss", f"unused: the dual clip applies to policy_loss ppo, not {loss}"))
    return issues


# sampling knobs after which vLLM's log-probs are of another distribution than the trainer's (trainer.rollout.vllm)
TRUNCATING_KNOBS: dict[str, tuple[float, ...]] = {"top_p": (1.0,), "top_k": (-1, 0), "min_p": (0.0,),
                                                  "repetition_penalty": (1.0,)}


def check_train_infer_correction(config: PipelineConfig) -> list[ConfigIssue]:
    """ROLL's train_infer_correction compares actor_train's recomputed old log-probs with the engine's
    (trainer.algorithms.train_infer); both must exist and differ only by numerics (docs/decisions/0040)."""
    correction, path = config.train_infer_correction, "train_infer_correction"
    issues = []
    weight = correction.is_weight
    if not weight.enabled:
        issues += [warning(f"{path}.is_weight.{name}", "has no effect while is_weight.enabled is false")
                   for name in ("weight_type", "upper_bound") if name in weight.model_fields_set]
    for i, rule in enumerate(correction.filters):
        where = f"{path}.filters.{i}"
        if not rule.enabled and rule.model_fields_set - {"enabled"}:
            issues.append(warning(f"{where}.enabled", "false: this filter is off and keeps every token"))
        elif rule.enabled and not (rule.ratio_enabled or rule.diff_enabled):
            issues.append(warning(where, "enabled, but ratio_enabled and diff_enabled are false: it keeps every "
                                  "token; enable one of them"))
    if not correction.acts():
        return issues
    if config.use_rollout_log_probs:
        issues.append(error(path, "needs two log-probs of each token, actor_train's recomputed old log-probs and "
                            "the rollout engine's; use_rollout_log_probs: true makes the engine's the old "
                            "log-probs (every ratio would be 1); set use_rollout_log_probs: false"))
    args = config.actor_infer.generating_args
    if strategy_name("actor_infer", config.actor_infer) == "vllm" and args is not None:
        truncating = [name for name, neutral in TRUNCATING_KNOBS.items() if getattr(args, name) not in neutral]
        if truncating:
            issues.append(warning(path, f"actor_infer.generating_args {', '.join(truncating)}: vLLM reports the "
                                  "log-probs of the truncated / penalised distribution it sampled from, actor_train "
                                  "those of the full one, so every ratio also carries the log of the kept mass, "
                                  "not only the numerical mismatch"))
    return issues
