"""The learner: everything between a rollout batch and new weights, outside the loops (issue 42).

    RolloutBatch (rows, scores, groups, engine log-probs, staleness, …)
      -> old / reference log-probs (actor_train, reference), values (critic)
      -> sample mask (difficulty_mask, length masks, query filter)
      -> reward processing (trainer.pipeline.rewarding) -> token rewards (KL in the reward)
      -> advantages (trainer.algorithms.advantages) -> loss weights (difficulty / length, staleness)
      -> off-policy (π_old/μ) and train-infer corrections
      -> critic update, actor update (each `call_sharded` by method; ppo_update on the workers)
    -> LearnResult (metrics, token rewards, advantages, values, returns, old log-probs, weights)

The learner reads the config through `LearnerSpec` alone (its KL, estimator, off-policy and train-infer knobs,
and the reward-processing `RewardSpec`), built once by the loop with `LearnerSpec.from_config(cfg)`.
`Learner.learn` never changes the batch it is handed: the rows the workers see are a new dict. The
loss normalisers (global token and sequence counts) are not part of it: ppo_update computes them per
mini-batch and passes them to the loss as an argument (`trainer.train.ppo_update.Normalisers`).
The RLVR loop (`rlvr.py`) and the agentic loop (`agentic.py`) both compose one Learner; the learner's
state (KL controller, running reward statistics) goes into their checkpoints via `state_dict`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trainer import roles
from trainer.algorithms import kl as kl_algos
from trainer.algorithms import off_policy, step_advantages
from trainer.algorithms.advantages import compute_advantages
from trainer.algorithms.train_infer import MismatchFilter, MismatchWeight, correct_mismatch
from trainer.config import topology
from trainer.config.topology import RolloutSchedule
from trainer.pipeline import dynamic_sampling, rewarding

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

PhaseTimer = Callable[[str], contextlib.AbstractContextManager[Any]]  # `timing/<phase>` scope (rlvr.Timer)


@dataclass(frozen=True)
class LearnerSpec:
    """The knobs the learner reads, and nothing else of the config (the narrow view of the `PipelineConfig`,
    like `LossSpec` for the losses and `RewardSpec` for reward processing, which it carries). The
    train-infer correction comes resolved into the algorithm's own terms: `mismatch_weight` None without
    `is_weight.enabled`, `mismatch_filters` the enabled filters with their checked bands (None: not checked)."""

    rewards: rewarding.RewardSpec
    adv_estimator: str
    gamma: float
    lambd: float
    norm_adv_by_std_in_grpo: bool
    add_token_level_kl: bool
    kl_penalty: str
    init_kl_coef: float
    target_kl: float | None
    kl_horizon: int
    kl_ctrl_type: str | None
    use_rollout_log_probs: bool
    critic_warmup: int
    off_policy_correction: str
    off_policy_cap: float
    stale_samples: str
    stale_sample_decay: float
    mismatch_weight: MismatchWeight | None
    mismatch_filters: tuple[MismatchFilter, ...]
    infer_engine: str  # actor_infer's strategy_name: hf_infer shares the trainer's numerics, vllm has its own

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> LearnerSpec:
        tic = cfg.train_infer_correction
        weight = MismatchWeight(tic.is_weight.weight_type, tic.is_weight.upper_bound) if tic.is_weight.enabled else None
        filters = tuple(MismatchFilter(rule.agg_type, (rule.ratio_low, rule.ratio_high) if rule.ratio_enabled else None,
                                       (rule.diff_low, rule.diff_high) if rule.diff_enabled else None)
                        for rule in tic.filters if rule.enabled)
        return cls(
            rewards=rewarding.RewardSpec.from_config(cfg), adv_estimator=cfg.adv_estimator, gamma=cfg.gamma,
            lambd=cfg.lambd, norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo,
            add_token_level_kl=cfg.add_token_level_kl, kl_penalty=cfg.kl_penalty, init_kl_coef=cfg.init_kl_coef,
            target_kl=cfg.target_kl, kl_horizon=cfg.kl_horizon, kl_ctrl_type=cfg.kl_ctrl_type,
            use_rollout_log_probs=cfg.use_rollout_log_probs, critic_warmup=cfg.critic_warmup,
            off_policy_correction=cfg.off_policy_correction, off_policy_cap=cfg.off_policy_cap,
            stale_samples=cfg.stale_samples, stale_sample_decay=cfg.stale_sample_decay,
            mismatch_weight=weight, mismatch_filters=filters,
            infer_engine=topology.strategy_name("actor_infer", cfg.actor_infer),
        )

    @property
    def corrects_train_infer(self) -> bool:
        """`train_infer_correction.acts()`: the weight is on, or an enabled filter checks a band."""
        return self.mismatch_weight is not None or any(
            f.ratio_band is not None or f.diff_band is not None for f in self.mismatch_filters)

    def recomputes_log_probs(self, optimizer_steps_per_rollout: int) -> bool:
        """Whether actor_train recomputes the old log-probs on every step. One optimizer step on fresh
        rollouts: the old policy IS the current one, so the loss uses the detached current log-probs and the
        extra forward pass is skipped (as verl and TRL do). It recomputes them when needed (not replaced by
        the engine's: use_rollout_log_probs), on every step for an engine with its own kernels (vllm), so
        that rollout/logprob_diff_* tracks the training-inference mismatch, and when train_infer_correction
        compares them with the engine's."""
        needs_old = optimizer_steps_per_rollout != 1 or self.add_token_level_kl
        return ((needs_old and not self.use_rollout_log_probs) or self.infer_engine != "hf_infer"
                or self.corrects_train_infer)


@dataclass(frozen=True)
class RolloutBatch:
    """One step's rows as the learner takes them.

    `rows`: the model inputs (input_ids, attention_mask, position_ids, response_mask: the tokens the loss
    sees), one row per sample; `scores` one value per row; `group_ids` the GRPO group of each row;
    `engine_log_probs` [rows, width] the rollout engine's (μ); `staleness` policy versions each row lags
    behind this update. Optional: `difficulty` per row (difficulty_loss_weight), `query_filter` the rows
    dynamic sampling keeps, `length_terms` the length reward's terms; the agentic loop's step-wise
    estimators pass `turn_ids` (each token's reply index) and `turn_scores` [rows, turns] (gigpo /
    step_reinforce: each turn's value replaces the processed score, on the turn's last token)."""

    rows: dict[str, Tensor]
    scores: Tensor
    group_ids: Tensor
    engine_log_probs: Tensor
    staleness: Tensor
    difficulty: Tensor | None = None
    query_filter: Tensor | None = None
    length_terms: Tensor | None = None
    turn_ids: Tensor | None = None
    turn_scores: Tensor | None = None

    @property
    def response_mask(self) -> Tensor:
        return self.rows["response_mask"]


@dataclass
class LearnResult:
    """What one update produced: its metrics (`actor/…`, `critic/…`, `async/…`, reward and mask metrics),
    the token rewards and advantages it trained on, the critic's values and returns (None without a
    critic), actor_train's old log-probs where it computed them (or the engine's, use_rollout_log_probs),
    and the per-sample loss weights (None: all 1)."""

    token_rewards: Tensor
    advantages: Tensor
    values: Tensor | None = None
    returns: Tensor | None = None
    old_log_probs: Tensor | None = None
    sample_weights: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def logprob_mismatch(engine: Tensor, trainer: Tensor, mask: Tensor) -> dict[str, float]:
    """Mean and max of |engine log-prob - trainer log-prob| over real response tokens: the
    training-inference mismatch (0 when both run the same numerics)."""
    gap = (engine - trainer).abs()[mask > 0]
    if gap.numel() == 0:
        return {}
    return {"rollout/logprob_diff_mean": float(gap.mean()), "rollout/logprob_diff_max": float(gap.max())}


def mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the ranks' metric dicts."""
    keys = dicts[0].keys()
    return {k: sum(d[k] for d in dicts) / len(dicts) for k in keys}


class Learner:
    """The update of one step over the trained groups (module docstring). Holds the KL controller and the
    running reward statistics, the only state an update carries to the next one."""

    def __init__(self, spec: LearnerSpec, groups: roles.RoleGroups, *, schedule: RolloutSchedule,
                 recomputes: bool) -> None:
        self.spec, self.groups, self.schedule = spec, groups, schedule
        self.recomputes_log_probs = recomputes
        self.uses_reference = "reference" in groups
        self.kl_ctrl = kl_algos.make_kl_controller(spec.init_kl_coef, spec.target_kl, spec.kl_horizon,
                                                   ctrl_type=spec.kl_ctrl_type)
        self.reward_state = rewarding.RewardStats()
        self.rewards = spec.rewards

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's `kl_ctrl` and `reward_stats` entries."""
        return {"kl_ctrl": {"type": type(self.kl_ctrl).__name__, **asdict(self.kl_ctrl)},
                "reward_stats": self.reward_state.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Restore both from a checkpoint's trainer_state; returns the KL controller's type and settings."""
        kl_state = dict(state["kl_ctrl"])
        kind = kl_state.pop("type")
        self.kl_ctrl = (kl_algos.AdaptiveKLController if kind == "AdaptiveKLController"
                        else kl_algos.FixedKLController)(**kl_state)
        self.reward_state = rewarding.RewardStats.from_state_dict(state["reward_stats"])
        return kind, kl_state

    # -- the update -----------------------------------------------------------------------------
    def learn(self, step: int, rollout: RolloutBatch, timer: PhaseTimer | None = None) -> LearnResult:
        """Old / reference log-probs, values, sample mask, reward processing, token rewards (KL in the reward),
        advantages, loss weights, off-policy terms, critic and actor updates. `rollout` is left as it is."""
        spec, timer = self.spec, timer or (lambda _phase: contextlib.nullcontext())
        metrics: dict[str, float] = {}
        staleness, engine_log_probs = rollout.staleness, rollout.engine_log_probs
        mask, scores = rollout.response_mask, rollout.scores
        batch: dict[str, Tensor] = {**rollout.rows, "scores": scores}  # the rows the workers see
        corrects = bool((staleness > 0).any()) and spec.off_policy_correction != "none"
        if self.recomputes_log_probs or corrects:
            with timer("old_log_probs"):
                batch["old_log_probs"] = torch.cat(self.groups["actor_train"].call_sharded(roles.Actor.compute_log_probs, batch))
            if not bool((staleness > 0).any()):  # for stale samples the gap is policy drift: async/is_ratio_*
                metrics.update(logprob_mismatch(engine_log_probs, batch["old_log_probs"], mask))
        if spec.use_rollout_log_probs:
            batch["old_log_probs"] = engine_log_probs
        if self.uses_reference:
            with timer("ref_log_probs"):
                batch["ref_log_probs"] = torch.cat(self.groups["reference"].call_sharded(roles.Reference.compute_log_probs, batch))
        values = None
        if "critic" in self.groups:
            with timer("values"):
                values = torch.cat(self.groups["critic"].call_sharded(roles.Critic.compute_values, batch))

        with timer("advantages"):
            keep, token_rewards, returns = self.advantages(rollout, batch, values, metrics)
        # the actor's loss sees only the kept samples (the critic still fits every sample's return)
        actor_batch = {**batch, "response_mask": mask * keep.unsqueeze(-1).to(mask.dtype)}
        weights = rewarding.sample_weights(self.rewards, mask, rollout.difficulty)
        if self.schedule.overlaps:
            weights, stale_metrics = staleness_terms(spec, self.schedule, step, staleness, weights)
            metrics.update(stale_metrics)
        if weights is not None:
            actor_batch["sample_weights"] = weights
        if corrects:
            actor_batch, ratio_metrics = correct_off_policy(spec, actor_batch, batch["old_log_probs"], engine_log_probs,
                                                            stale=staleness > 0)
            metrics.update(ratio_metrics)
        if spec.corrects_train_infer:  # fresh rows; stale ones only where off_policy_correction leaves them
            rows = staleness == 0 if corrects else torch.ones_like(staleness, dtype=torch.bool)
            actor_batch, mismatch_metrics = correct_train_infer(spec, actor_batch, mask, batch["old_log_probs"],
                                                                engine_log_probs, rows)
            metrics.update(mismatch_metrics)

        if "critic" in self.groups:
            with timer("critic_update"):
                metrics.update(mean_dicts(self.groups["critic"].call_sharded(roles.Critic.train_step, batch, step=step)))
        # no group passed the query filter (dynamic sampling found none within its budget): nothing to learn from,
        # and an optimizer step on an empty loss would still move the weights (Adam's momentum)
        if step > spec.critic_warmup and bool(keep.any()):
            with timer("actor_update"):
                metrics.update(mean_dicts(
                    self.groups["actor_train"].call_sharded(roles.Actor.train_step, actor_batch, step=step)))
        return LearnResult(token_rewards=token_rewards, advantages=batch["advantages"], values=values, returns=returns,
                           old_log_probs=batch.get("old_log_probs"), sample_weights=weights, metrics=metrics)

    def advantages(self, rollout: RolloutBatch, batch: dict[str, Tensor], values: Tensor | None,
                   metrics: dict[str, float]) -> tuple[Tensor, Tensor, Tensor | None]:
        """Sample mask, reward processing, token rewards (KL in the reward), advantages into `batch` (the
        learner's own dict: advantages, values, returns). Returns (kept rows, token rewards, returns)."""
        spec, mask, scores, group_ids = self.spec, rollout.response_mask, rollout.scores, rollout.group_ids
        keep, mask_metrics = rewarding.sample_mask(self.rewards, scores, group_ids, response_lengths=mask.sum(-1),
                                                   query_filter=rollout.query_filter)
        metrics.update(mask_metrics)
        metrics.update(dynamic_sampling.zero_variance_metrics(scores, group_ids, keep))
        if rollout.turn_scores is None:
            processed, self.reward_state, reward_metrics = rewarding.process_scores(
                self.rewards, scores, group_ids, self.reward_state, response_lengths=mask.sum(-1),
                length_terms=rollout.length_terms,
            )
            metrics.update(reward_metrics)
        else:  # the turns' values go on their own last tokens below
            processed = torch.zeros_like(scores)
        if spec.add_token_level_kl and self.uses_reference:
            token_kl = kl_algos.token_kl(  # KL of the rollout policy (= actor before this update)
                spec.kl_penalty, mask, log_probs=batch["old_log_probs"], ref_log_probs=batch["ref_log_probs"]
            )
            token_rewards, current_kl = kl_algos.add_kl_to_rewards(processed, token_kl, mask, self.kl_ctrl.value)
            metrics["actor/reward_kl"] = metrics["actor/reward_kl_penalty"] = current_kl  # ours, verl's
            metrics["actor/kl_coef"] = metrics["actor/reward_kl_penalty_coeff"] = self.kl_ctrl.value
            self.kl_ctrl = self.kl_ctrl.update(current_kl, n_steps=mask.size(0))
        else:
            token_rewards = kl_algos.scores_to_token_rewards(processed, mask)
        if rollout.turn_scores is not None:
            assert rollout.turn_ids is not None, "turn_scores need turn_ids"
            token_rewards = token_rewards + step_advantages.turn_token_rewards(rollout.turn_scores, rollout.turn_ids)
        token_rewards = rewarding.process_token_rewards(self.rewards, token_rewards, mask)
        adv = compute_advantages(
            spec.adv_estimator, token_rewards, mask, group_ids=group_ids, values=values,
            gamma=spec.gamma, lambd=spec.lambd, norm_adv_by_std_in_grpo=spec.norm_adv_by_std_in_grpo,
            turn_ids=rollout.turn_ids,
        )
        batch["advantages"] = rewarding.process_advantages(self.rewards, adv.advantages, mask)
        if values is not None:
            batch["values"], batch["returns"] = values, adv.returns
        return keep, token_rewards, batch.get("returns")


# -- corrections (pure: the learner's knobs and tensors in, a new actor batch and metrics out) ------------------
def staleness_terms(spec: LearnerSpec, schedule: RolloutSchedule, step: int, staleness: Tensor,
                    weights: Tensor | None) -> tuple[Tensor | None, dict[str, float]]:
    """Staleness metrics; with stale_samples downweight, samples beyond max_staleness get loss weight
    stale_sample_decay ^ (excess versions), on top of the other sample weights."""
    bound = schedule.max_staleness
    metrics = {"async/policy_version": float(step - 1), "async/staleness_min": float(staleness.min()),
               "async/staleness_mean": float(staleness.float().mean()),
               "async/staleness_max": float(staleness.max())}
    beyond = staleness > bound
    if spec.stale_samples == "downweight" and bool(beyond.any()):
        decay = off_policy.staleness_weights(staleness, bound, spec.stale_sample_decay)
        weights = decay if weights is None else weights * decay
        metrics |= {"async/downweighted_samples": float(beyond.sum()),
                    "async/stale_weight_mean": float(decay.mean())}
    return weights, metrics


def correct_off_policy(spec: LearnerSpec, actor_batch: dict[str, Tensor], old_log_probs: Tensor,
                       behaviour_log_probs: Tensor, stale: Tensor) -> tuple[dict[str, Tensor], dict[str, float]]:
    """Stale samples weighed by ρ = π_old/μ per token: `tis` scales their advantages by min(ρ, C) (exactly
    the clipped surrogate weighted by it, w ≥ 0), `mask` leaves tokens with ρ outside [1/C, C] out."""
    mask = actor_batch["response_mask"]
    stale_mask = mask * stale.unsqueeze(-1).to(mask.dtype)
    ratios = off_policy.importance_ratios(old_log_probs, behaviour_log_probs, stale_mask)
    metrics = {f"async/{k}": v for k, v in
               off_policy.importance_ratio_stats(ratios, stale_mask, spec.off_policy_cap).items()}
    rows = stale.unsqueeze(-1)
    if spec.off_policy_correction == "tis":
        weights = off_policy.truncated_importance_weights(ratios, stale_mask, spec.off_policy_cap)
        return {**actor_batch, "advantages": torch.where(rows, actor_batch["advantages"] * weights,
                                                         actor_batch["advantages"])}, metrics
    keep = off_policy.masked_importance_keep(ratios, stale_mask, spec.off_policy_cap)
    kept = torch.where(rows, mask * keep.to(mask.dtype), mask)
    metrics["async/is_masked_tokens"] = float((mask - kept).sum())
    return {**actor_batch, "response_mask": kept}, metrics


def correct_train_infer(spec: LearnerSpec, actor_batch: dict[str, Tensor], response_mask: Tensor,
                        old_log_probs: Tensor, engine_log_probs: Tensor,
                        rows: Tensor) -> tuple[dict[str, Tensor], dict[str, float]]:
    """ROLL's train_infer_correction on `rows` (trainer.algorithms.train_infer), its ratios over each row's
    response tokens: the actor's loss mask keeps the tokens every enabled filter passes, and with is_weight
    `train_infer_weights` carries w_t (1 on the other rows), which actor_loss multiplies into the
    policy-gradient term. Metrics `actor/...` under ROLL's names (docs/decisions/0040)."""
    weight, filters = spec.mismatch_weight, spec.mismatch_filters
    on_rows = response_mask * rows.unsqueeze(-1).to(response_mask.dtype)
    out = correct_mismatch(old_log_probs, engine_log_probs, on_rows, weight=weight, filters=filters)
    mask, where = actor_batch["response_mask"], rows.unsqueeze(-1)
    corrected = {**actor_batch, "response_mask": torch.where(where, mask * out.keep.to(mask.dtype), mask)}
    if weight is not None:
        corrected["train_infer_weights"] = torch.where(where, out.weights, torch.ones_like(out.weights))
    return corrected, {f"actor/{key}": value for key, value in out.metrics.items()}
