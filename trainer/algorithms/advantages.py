"""Advantage estimators (knob `adv_estimator`).

Inputs: `token_level_rewards` [batch, response_len] (an outcome reward sits on the last real token,
see kl.scores_to_token_rewards; KL-in-reward adds −β·kl on every token), `response_mask` (same
shape, non-zero = real token), `group_ids` [batch] long (samples of one prompt share an id; groups
need not be contiguous). Every estimator returns `Advantages(advantages, returns)`, both
[batch, response_len] and exactly 0 at masked positions. Values sitting at masked positions never
change a result.

Masked positions inside a response (e.g. tool/observation tokens of a multi-turn episode) are
skipped, not treated as steps: returns and GAE flow through them unchanged and undiscounted (as
verl's multi-turn GAE does). With right padding only, this is the usual recursion.

A sample whose mask is empty scores 0 and takes no part in its group's statistics.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from trainer.algorithms import step_advantages
from trainer.algorithms.stats import (
    as_bool_mask,
    check_same_shape,
    discounted_scan,
    fill_masked,
    group_mean_std,
    masked_sum,
    masked_whiten,
    safe_divisor,
)


class Advantages(NamedTuple):
    advantages: Tensor
    returns: Tensor


def _check_unit_interval(**params: float) -> None:
    for name, value in params.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")


def _check_group_ids(group_ids: Tensor, batch: int) -> None:
    if group_ids.shape != (batch,):
        raise ValueError(
            f"group_ids must have shape ({batch},) (one id per sample), got {tuple(group_ids.shape)}"
        )


def discounted_returns(token_level_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Return-to-go over real tokens: G_t = r_t + γ·G_{t'}, t' the next real token (G after the last = 0)."""
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    _check_unit_interval(gamma=gamma)
    return discounted_scan(token_level_rewards, response_mask, gamma)


def gae(
    token_level_rewards: Tensor,
    values: Tensor,
    response_mask: Tensor,
    gamma: float = 1.0,
    lambd: float = 1.0,
) -> Advantages:
    """Generalised Advantage Estimation (`gae`; knobs `gamma`, `lambd`).

    δ_t = r_t + γ·V_{t'} − V_t,   A_t = δ_t + γλ·A_{t'},   R_t = A_t + V_t
    where t' is the next real token (V and A after the last real token are 0). Not whitened here:
    that is `whiten_advantages`.
    """
    check_same_shape(token_level_rewards=token_level_rewards, values=values, response_mask=response_mask)
    _check_unit_interval(gamma=gamma, lambd=lambd)
    mask = as_bool_mask(response_mask)
    rewards = fill_masked(token_level_rewards, mask)
    values = fill_masked(values, mask)
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage_t = delta + gamma * lambd * next_advantage
        real = mask[:, t]
        advantages[:, t] = torch.where(real, advantage_t, torch.zeros_like(advantage_t))
        next_value = torch.where(real, values[:, t], next_value)
        next_advantage = torch.where(real, advantage_t, next_advantage)
    returns = fill_masked(advantages + values, mask)
    return Advantages(advantages, returns)


def reinforce(
    token_level_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0, batch_baseline: bool = False
) -> Advantages:
    """REINFORCE (`reinforce`, ROLL): A_t = G_t − b, G_t the discounted return-to-go.

    b = 0, or with batch_baseline=True the batch mean of the whole-response return G_first (the
    return at each sample's first real token), over samples with a non-empty mask. With γ = 1 and
    an outcome reward this is ROLL's `reinforce` with `norm_mean_type: batch`. returns = G.
    """
    returns = discounted_returns(token_level_rewards, response_mask, gamma)
    mask = as_bool_mask(response_mask)
    if not batch_baseline:
        return Advantages(returns.clone(), returns)
    first = mask.long().argmax(-1)  # index of the first real token
    whole_return = returns.gather(-1, first.unsqueeze(-1)).squeeze(-1)
    has_tokens = mask.any(-1)
    baseline = fill_masked(whole_return, has_tokens).sum() / has_tokens.sum().clamp(min=1)
    return Advantages(fill_masked(returns - baseline, mask), returns)


def reinforce_plus_plus(token_level_rewards: Tensor, response_mask: Tensor, gamma: float = 1.0) -> Advantages:
    """REINFORCE++ (`reinforce_plus_plus`): A = whiten(G) over all real tokens of the batch.

    G_t is the discounted return-to-go; whitening is masked (mean and unbiased std of the real
    tokens). returns = G. An empty batch mask gives zeros.
    """
    returns = discounted_returns(token_level_rewards, response_mask, gamma)
    return Advantages(masked_whiten(returns, response_mask), returns)


def _sequence_scores(token_level_rewards: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(s_i = Σ_t r_it over real tokens, has_tokens_i)."""
    check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    return masked_sum(token_level_rewards, response_mask, dim=-1), as_bool_mask(response_mask).any(-1)


def _broadcast(per_seq: Tensor, response_mask: Tensor) -> Tensor:
    return fill_masked(per_seq.unsqueeze(-1).expand(response_mask.shape), response_mask)


def reinforce_plus_plus_baseline(
    token_level_rewards: Tensor, response_mask: Tensor, group_ids: Tensor
) -> Advantages:
    """REINFORCE++ with group baseline (`reinforce_plus_plus_baseline`).

    A_it = whiten(s_i − mean_{j∈g(i)} s_j) over all real tokens of the batch, s_i = Σ_t r_it.
    A group of one has baseline s_i itself (advantage 0); a zero-variance batch whitens to 0.
    returns = A.
    """
    scores, has_tokens = _sequence_scores(token_level_rewards, response_mask)
    _check_group_ids(group_ids, scores.shape[0])
    mean, _, _ = group_mean_std(scores, group_ids, valid=has_tokens)
    advantages = masked_whiten(_broadcast(scores - mean, response_mask), response_mask)
    return Advantages(advantages, advantages)


def grpo(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    norm_adv_by_std: bool = True,
    epsilon: float = 1e-6,
) -> Advantages:
    """GRPO (`grpo`; Dr.GRPO with `norm_adv_by_std_in_grpo: false`).

    A_it = (s_i − mean_g) / (std_g + ε)   (norm_adv_by_std), or  s_i − mean_g  (Dr.GRPO),
    s_i = Σ_t r_it, std unbiased as in verl/ROLL. Edge cases: a zero-variance group (all solved or
    all failed) and a group of one give A = 0 (the numerator is exactly 0; we divide by 1 rather
    than ε). returns = A.
    """
    scores, has_tokens = _sequence_scores(token_level_rewards, response_mask)
    _check_group_ids(group_ids, scores.shape[0])
    mean, std, _ = group_mean_std(scores, group_ids, valid=has_tokens)
    centred = scores - mean
    per_seq = centred / safe_divisor(std, epsilon) if norm_adv_by_std else centred
    advantages = _broadcast(per_seq, response_mask)
    return Advantages(advantages, advantages)


def rloo(token_level_rewards: Tensor, response_mask: Tensor, group_ids: Tensor) -> Advantages:
    """RLOO (`rloo`): A_i = s_i − (1/(n−1))·Σ_{j∈g(i), j≠i} s_j = n/(n−1)·(s_i − mean_g).

    A group of one has no other sample to form a baseline: its advantage is 0. returns = A.
    """
    scores, has_tokens = _sequence_scores(token_level_rewards, response_mask)
    _check_group_ids(group_ids, scores.shape[0])
    mean, _, size = group_mean_std(scores, group_ids, valid=has_tokens)
    per_seq = torch.where(
        size > 1, size / (size - 1).clamp(min=1) * (scores - mean), torch.zeros_like(scores)
    )
    advantages = _broadcast(fill_masked(per_seq, has_tokens), response_mask)
    return Advantages(advantages, advantages)


def remax(token_level_rewards: Tensor, response_mask: Tensor, baseline_rewards: Tensor) -> Advantages:
    """ReMax (`remax`): A_t = G_t − b_i, G_t the undiscounted return-to-go and b_i [batch] the reward
    of the greedy response to the same prompt (computed by the caller). returns = G.
    """
    returns = discounted_returns(token_level_rewards, response_mask, 1.0)
    if baseline_rewards.shape != (returns.shape[0],):
        raise ValueError(
            f"baseline_rewards must have shape ({returns.shape[0]},) (one greedy reward per sample), "
            f"got {tuple(baseline_rewards.shape)}"
        )
    return Advantages(fill_masked(returns - baseline_rewards.unsqueeze(-1), response_mask), returns)


# The `adv_estimator` names fixed in docs/decisions/0001.
ADV_ESTIMATORS = {
    "gae": gae,
    "reinforce": reinforce,
    "grpo": grpo,
    "reinforce_plus_plus": reinforce_plus_plus,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline,
    "rloo": rloo,
    "remax": remax,
}


def compute_advantages(
    adv_estimator: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    *,
    group_ids: Tensor | None = None,
    values: Tensor | None = None,
    baseline_rewards: Tensor | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    reinforce_batch_baseline: bool = False,
    turn_ids: Tensor | None = None,
) -> Advantages:
    """One entry point for the pipeline: picks the estimator by its config name and checks that the
    inputs it needs are present (ValueError naming the missing one otherwise). The step-wise agentic
    estimators (step_advantages) read `turn_ids` [batch, response_len] (each sampled token's reply
    index, −1 elsewhere); gigpo and step_reinforce expect their per-turn values already placed on each
    turn's last token (step_advantages.turn_token_rewards). returns = A for them."""

    def need(name: str, tensor: Tensor | None) -> Tensor:
        if tensor is None:
            raise ValueError(f"adv_estimator {adv_estimator!r} needs `{name}`, which was not given")
        return tensor

    if adv_estimator == "gae":
        return gae(token_level_rewards, need("values", values), response_mask, gamma, lambd)
    if adv_estimator == "reinforce":
        return reinforce(token_level_rewards, response_mask, gamma, reinforce_batch_baseline)
    if adv_estimator == "reinforce_plus_plus":
        return reinforce_plus_plus(token_level_rewards, response_mask, gamma)
    if adv_estimator == "reinforce_plus_plus_baseline":
        return reinforce_plus_plus_baseline(token_level_rewards, response_mask, need("group_ids", group_ids))
    if adv_estimator == "grpo":
        return grpo(token_level_rewards, response_mask, need("group_ids", group_ids), norm_adv_by_std_in_grpo)
    if adv_estimator == "rloo":
        return rloo(token_level_rewards, response_mask, need("group_ids", group_ids))
    if adv_estimator == "remax":
        return remax(token_level_rewards, response_mask, need("baseline_rewards", baseline_rewards))
    if adv_estimator in step_advantages.STEP_ADV_ESTIMATORS:
        turns = torch.where(as_bool_mask(response_mask), need("turn_ids", turn_ids).long(), -1)
        step_fn = (step_advantages.agentic_reinforce if adv_estimator == "agentic_reinforce"
                   else step_advantages.turn_returns)
        advantages = step_fn(token_level_rewards, turns, gamma)
        return Advantages(advantages, advantages)
    raise ValueError(f"adv_estimator {adv_estimator!r} is not known; valid: "
                     f"{', '.join([*ADV_ESTIMATORS, *step_advantages.STEP_ADV_ESTIMATORS])}")
