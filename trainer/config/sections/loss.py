"""Algorithm, KL and loss knobs (flat top-level keys) and the training-inference mismatch correction."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from trainer.config.sections.base import Section, fld, fld_factory, import_only

MismatchLevel = Literal["token", "segment", "geometric", "sequence"]


class TrainInferISWeightConfig(Section):
    """ROLL's train_infer_correction.is_weight (trainer.algorithms.train_infer, docs/decisions/0040)."""

    enabled: bool = fld(
        False, category="Loss",
        description="Weight each token's policy-gradient term by the train-infer importance ratio rho = "
        "pi_old / mu (actor_train's recomputed log-prob over the rollout engine's), clamped to [0, upper_bound].",
    )
    weight_type: MismatchLevel = fld(
        "token", category="Loss",
        description="Level of rho: token (per token), geometric (exp of the sample's mean log-ratio), sequence "
        "(exp of its sum), segment (exp of the mean over each run of consecutive response tokens: a turn).",
    )
    upper_bound: float | None = fld(
        1.2, category="Loss", gt=0, description="Clamp of the weight (truncated importance sampling); null: untruncated.",
    )
    detach: bool = fld(
        True, category="Loss",
        inactive=import_only("the weight comes from two constant log-probs and never carries a gradient, as in ROLL"),
        description="ROLL: detach the weight from the graph.",
    )


class TrainInferFilterConfig(Section):
    """One of ROLL's train_infer_correction.filters: tokens outside the band leave the actor's loss."""

    enabled: bool = fld(False, category="Loss", description="Apply this filter.")
    agg_type: MismatchLevel = fld(
        "token", category="Loss",
        description="Level the ratio / difference is read at: token, geometric (sample mean of the log-ratio / of "
        "the difference), sequence (sum), segment (mean over each run of consecutive response tokens).",
    )
    ratio_enabled: bool = fld(True, category="Loss",
                              description="Keep only tokens with ratio_low <= rho <= ratio_high (rho = pi_old / mu).")
    ratio_low: float = fld(0.8, category="Loss", description="Lower bound of rho (inclusive).")
    ratio_high: float = fld(1.2, category="Loss", gt=0, description="Upper bound of rho (inclusive).")
    diff_enabled: bool = fld(
        False, category="Loss",
        description="Keep only tokens with diff_low <= pi_old - mu <= diff_high (probabilities of the sampled token).",
    )
    diff_low: float = fld(-0.2, category="Loss", description="Lower bound of pi_old - mu (inclusive).")
    diff_high: float = fld(0.2, category="Loss", description="Upper bound of pi_old - mu (inclusive).")

    @model_validator(mode="after")
    def _bands_not_empty(self) -> TrainInferFilterConfig:
        for name in ("ratio", "diff"):
            low, high = getattr(self, f"{name}_low"), getattr(self, f"{name}_high")
            if low > high:
                raise ValueError(f"{name}_low {low} > {name}_high {high}: no token would pass; swap them")
        return self


class TrainInferCorrectionConfig(Section):
    """ROLL's train_infer_correction: IS weights and filters of actor_train's vs the engine's log-probs (0040)."""

    is_weight: TrainInferISWeightConfig = fld_factory(
        TrainInferISWeightConfig, category="Loss", description="Importance weight of each token's policy-gradient term.",
    )
    filters: list[TrainInferFilterConfig] = fld_factory(
        list, category="Loss", description="Filters applied one after the other to the actor's loss mask.",
    )

    def acts(self) -> bool:
        """Whether it changes anything: the weight is on, or an enabled filter checks a band."""
        return self.is_weight.enabled or any(f.enabled and (f.ratio_enabled or f.diff_enabled) for f in self.filters)


class AlgorithmKnobs(Section):
    """Algorithm: the advantage estimator and its discounts."""

    adv_estimator: Literal[
        "gae", "reinforce", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "remax",
        "gigpo", "step_reinforce", "agentic_reinforce",
    ] = fld(
        "gae", category="Algorithm", common=True,
        description="How advantages are computed: gae needs a critic; grpo, rloo and reinforce_plus_plus_baseline "
        "compare the responses of one prompt. Agentic runs only, per turn of a trajectory (ROLL's step-wise "
        "estimators): gigpo (GiGPO: the episode's score normalised in its reward_normalization group, weighted by "
        "episode_reward_weight, plus the turn's discounted step return normalised among the turns of its start-state "
        "group that answered the same observation, weighted by step_reward_weight), step_reinforce (the turn's "
        "discounted step return normalised in its reward_normalization group), agentic_reinforce (the trajectory's "
        "score discounted by gamma once per later turn). remax is accepted but not built.",
    )
    ppo_epochs: int = fld(1, category="Algorithm", ge=1, description="Passes of optimizer updates over each rollout batch.")
    use_rollout_log_probs: bool = fld(
        False, category="Loss",
        description="Old log-probs of the PPO ratio come from the rollout engine instead of a recompute by "
        "actor_train (verl and ROLL recompute). rollout/logprob_diff_mean and _max report the gap whenever both exist.",
    )
    gamma: float = fld(1.0, category="Algorithm", ge=0, le=1, description="Discount factor of future rewards.")
    lambd: float = fld(
        0.95, category="Algorithm", ge=0, le=1, description="GAE lambda: 1 is low bias / high variance, 0 the opposite."
    )
    norm_adv_by_std_in_grpo: bool = fld(
        True, category="Algorithm",
        description="GRPO: divide group-centred rewards by the group's std; false gives Dr.GRPO.",
    )
    policy_loss: Literal["ppo", "gspo"] = fld(
        "ppo", category="Loss", description="Policy objective: token-level PPO ratio clipping, or sequence-level GSPO."
    )
    critic_warmup: int = fld(0, category="Algorithm", ge=0, description="Steps that train only the critic at the start.")


class KLKnobs(Section):
    """KL: the estimator, KL in the reward and its controller, the KL loss."""

    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl", "full"] = fld(
        "kl", category="KL",
        description="KL estimator between policy and reference: kl (k1), abs, mse (k2), low_var_kl (k3), full.",
    )
    add_token_level_kl: bool = fld(False, category="KL", description="Subtract a per-token KL penalty from rewards.")
    init_kl_coef: float = fld(0.2, category="KL", ge=0, common=True, description="Starting coefficient of the KL penalty in the reward.")
    kl_ctrl_type: Literal["fixed", "adaptive"] | None = fld(
        None, category="KL",
        description="KL-in-reward controller: fixed keeps init_kl_coef, adaptive steers it toward target_kl; "
        "unset is adaptive exactly when target_kl is set (ROLL's rule).",
    )
    target_kl: float | None = fld(None, category="KL", gt=0, description="KL the adaptive controller steers toward.")
    kl_horizon: int = fld(10000, category="KL", ge=1, description="Time constant (steps) of the adaptive controller.")
    use_kl_loss: bool = fld(False, category="KL", common=True, description="Add a KL term to the policy loss (GRPO style).")
    kl_loss_coef: float = fld(0.0, category="KL", ge=0, common=True, description="Weight of the KL loss term.")


class LossKnobs(Section):
    """Loss: the policy objective, its clips, aggregation and extra terms."""

    pg_clip: float = fld(0.2, category="Loss", gt=0, acts_through="clip_range",
                         description="PPO ratio clip range (both sides).")
    pg_clip_low: float | None = fld(None, category="Loss", gt=0, acts_through="clip_range",
                                    description="Lower clip range; overrides pg_clip below.")
    pg_clip_high: float | None = fld(
        None, category="Loss", gt=0, acts_through="clip_range",
        description="Upper clip range (clip-higher); overrides pg_clip above.",
    )
    dual_clip_loss: bool = fld(False, category="Loss", description="Bound the loss of negative-advantage tokens (dual clip).")
    clip_ratio_c: float = fld(3.0, category="Loss", gt=1, description="Dual-clip constant c (> 1).")
    value_clip: float | None = fld(None, category="Loss", gt=0, description="Clip value predictions around old values.")
    loss_agg_mode: Literal[
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = fld("token-mean", category="Loss", description="How per-token losses are reduced to one number.")
    entropy_loss_coef: float = fld(0.0, category="Loss", description="Weight of the entropy bonus (encourages exploration).")
    sft_loss_coef: float = fld(0.0, category="Loss", ge=0, description="Weight of a supervised loss on positive samples.")
    rl_loss_coef: float = fld(1.0, category="Loss", ge=0, description="Weight of the policy-gradient loss.")
    use_topr_loss: bool = fld(False, category="Loss", description="Use the TOPR (tapered off-policy) objective.")
    max_grad_norm: float = fld(1.0, category="Optimizer", inactive=import_only("each training role clips with its training_args.max_grad_norm"), gt=0, description="Pipeline-level gradient norm clip.")
    l2: float = fld(0.0, category="Loss", inactive=import_only("use training_args.weight_decay (decoupled AdamW decay)"), ge=0, description="L2 penalty on weights added to the loss.")
    difficulty_loss_weight: bool = fld(
        False, category="Loss",
        description="Weight samples by prompt difficulty (0.5 + 1.5 x the data's `difficulty` column in [0, 1]).",
    )
    max_len_mask: bool = fld(
        False, category="Loss",
        description="Leave responses as long as the generation limit (cut off) out of the actor's loss.",
    )
    mask_type: Literal["all", "loss"] = fld(
        "loss", category="Loss", inactive=import_only("the sample masks leave samples out of the actor's loss "
                                                     "(loss); the critic still fits them"),
        description="What the masks drop: the samples entirely, or only their loss.",
    )
    difficulty_mask: bool = fld(
        False, category="Loss", description="Leave prompts that are too easy or too hard (by group accuracy) out."
    )
    difficulty_low_threshold: float = fld(
        0.0, category="Loss", ge=0, le=1, description="Group accuracy at or below which a prompt counts as too hard."
    )
    difficulty_high_threshold: float = fld(
        1.0, category="Loss", ge=0, le=1, description="Group accuracy at or above which a prompt counts as too easy."
    )
    balance_length: bool = fld(False, category="Loss", inactive=import_only("micro-batches are split by sample count"), description="Balance response lengths across data-parallel ranks.")
    minibatch_data_iter_num: int = fld(1, category="Loss", inactive=import_only("ppo_epochs sets the passes over each rollout"), ge=1, description="Passes over each mini-batch.")
    error_max_len_clip: bool = fld(
        False, category="Reward processing",
        description="Leave wrong answers (score 0) of error_max_len_threshold tokens or more out of the actor's "
        "loss; as in ROLL, samples scored neither 0 nor 1 are left out too.",
    )
    error_max_len_threshold: int = fld(
        9999999999, category="Reward processing", ge=1, description="Length from which error_max_len_clip drops wrong answers."
    )
    length_loss_weight: bool = fld(
        False, category="Loss", description="Weight samples by response length (shorter responses weigh more)."
    )
