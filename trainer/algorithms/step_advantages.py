"""ROLL's step-wise agentic advantage estimators (knob `adv_estimator`: gigpo, step_reinforce,
agentic_reinforce) on the agentic batch layout: one row per trajectory, its replies (turns) and the
observations between them alternating in the response (trainer.pipeline.trajectory).

Turn-level tensors are [batch, turns] with a `turn_mask` (turn k of trajectory i exists); token-level
ones are [batch, response_len] with `turn_ids` (the index k of the reply each sampled token belongs
to, −1 on observation and padding tokens). A trajectory's step scores are r_ik = the environment's
reward for reply k plus its format penalty, so Σ_k r_ik is its score s_i.

Step returns (GiGPO Eq. 5; ROLL `compute_discounted_returns`, γ_s = `step_reward_gamma`):

    G_ik = r_ik + γ_s·G_i,k+1          (G after the last turn = 0)

`norm` is reward_normalization's pair (trajectory_norm.normalize_scores: norm_mean_type / norm_std_type,
unset ones from method) applied inside groups of turns; GiGPO's anchor term reads `method` alone, as ROLL
builds it (`RewardNormalizationConfig(grouping="state_group_id", method=...)`: the pair method names). ROLL trains one row per turn (its StepEnvManager), so its
group statistics count every turn: a trajectory weighs as many times as it has turns (verl-agent's
`compute_mean_std_cross_steps`, its default). The estimators reproduce that on our rows.

gigpo (GiGPO, arXiv 2505.10978; ROLL `compute_response_level_rewards`):

    A_ik = w_E·norm(s_i | episode group) + w_S·norm(G_ik | anchor group)

    w_E = episode_reward_weight, w_S = step_reward_weight; episode groups: reward_normalization.grouping
    (state: one start state; inductive: one tag; batch); anchor groups: the turns of one start-state
    group whose observation before the reply is the same (GiGPO's anchor states; ROLL groups step rows
    by traj_group_id, then by the hash of the observation), a state revisited within one trajectory
    included.

step_reinforce (ROLL):   A_ik = norm(G_ik | episode group)

Token placement (gigpo, step_reinforce), as on ROLL's one-row-per-turn batches: turn k's value sits on
its last token (plus −β·kl_t on every token with KL in the reward), and a token's advantage is the
return-to-go inside its own turn, discounted by γ = `gamma` (ROLL `compute_reinforce_return` on a step
row). With γ = 1 and no KL in the reward, every token of turn k gets A_ik.

agentic_reinforce (ROLL `compute_agentic_reinforce_return`, one row per trajectory): with e_k the last
token of turn k and r_t the token rewards, every token of turn k gets

    V_k = r_{e_k} + γ·V_{k+1}          (V after the last turn = 0)

so with the trajectory's score R on its last token, turn k of n gets γ^(n−k)·R; only the rewards on a
turn's last token count (as in ROLL, a KL penalty elsewhere in the turn is not read).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from trainer.algorithms.stats import as_bool_mask, check_same_shape, discounted_scan, fill_masked
from trainer.algorithms.trajectory_norm import normalize_scores

STEP_ADV_ESTIMATORS: tuple[str, ...] = ("gigpo", "step_reinforce", "agentic_reinforce")
# the estimators whose value is computed per turn from step scores (the others read token rewards only)
TURN_SCORE_ESTIMATORS: tuple[str, ...] = ("gigpo", "step_reinforce")


class GiGPOAdvantages(NamedTuple):
    advantages: Tensor  # [batch, turns]: w_E·episode + w_S·step
    episode: Tensor  # norm(s_i | episode group), on every turn of trajectory i
    step: Tensor  # norm(G_ik | anchor group)


def _check_gamma(name: str, gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {gamma}")


def step_returns(step_scores: Tensor, turn_mask: Tensor, gamma: float) -> Tensor:
    """G_ik = r_ik + γ_s·G_i,k+1 over the real turns of each trajectory [batch, turns]; 0 elsewhere."""
    check_same_shape(step_scores=step_scores, turn_mask=turn_mask)
    _check_gamma("step_reward_gamma", gamma)
    return discounted_scan(step_scores, turn_mask, gamma)


def normalize_turns(values: Tensor, turn_mask: Tensor, group_ids: Tensor, method: str,
                    mean_type: str | None = None, std_type: str | None = None) -> Tensor:
    """normalize_scores(method, mean_type, std_type) applied to the real turns' values [batch, turns] inside
    the groups of `group_ids` [batch, turns] (every real turn one entry; a batch type: all real turns); 0 at
    masked turns."""
    check_same_shape(values=values, turn_mask=turn_mask, group_ids=group_ids)
    mask = as_bool_mask(turn_mask)
    out = torch.zeros_like(values)
    if bool(mask.any()):
        out[mask] = normalize_scores(values[mask], group_ids[mask], method, mean_type, std_type)
    return out


def anchor_groups(state_groups: Tensor, anchor_ids: Tensor) -> Tensor:
    """One id [batch, turns] per distinct (start-state group of the trajectory, anchor state before the
    turn) pair: the turns GiGPO compares. `state_groups` [batch], `anchor_ids` [batch, turns] (equal ids
    = identical observations)."""
    if anchor_ids.dim() != 2 or state_groups.shape != anchor_ids.shape[:1]:
        raise ValueError(f"state_groups must have shape ({anchor_ids.shape[0]},) and anchor_ids [batch, turns]; "
                         f"got {tuple(state_groups.shape)} and {tuple(anchor_ids.shape)}")
    pairs = torch.stack([state_groups.unsqueeze(-1).expand_as(anchor_ids), anchor_ids], dim=-1)
    _, ids = torch.unique(pairs.reshape(-1, 2), dim=0, return_inverse=True)
    return ids.reshape(anchor_ids.shape)


def gigpo(
    episode_scores: Tensor,
    returns: Tensor,
    turn_mask: Tensor,
    episode_groups: Tensor,
    anchor_group_ids: Tensor,
    method: str,
    episode_weight: float = 1.0,
    step_weight: float = 1.0,
    mean_type: str | None = None,
    std_type: str | None = None,
) -> GiGPOAdvantages:
    """GiGPO per turn (module docstring): A_ik = w_E·norm(s_i | episode group) + w_S·norm(G_ik | anchor
    group). episode_scores s [batch], returns G [batch, turns] (step_returns), episode_groups [batch],
    anchor_group_ids [batch, turns] (anchor_groups). The episode term normalises with the pair (method,
    mean_type, std_type), the anchor term with `method` alone (module docstring)."""
    batch = returns.shape[0]
    if episode_scores.shape != (batch,) or episode_groups.shape != (batch,):
        raise ValueError(f"episode_scores and episode_groups must have shape ({batch},) (one per trajectory), "
                         f"got {tuple(episode_scores.shape)} and {tuple(episode_groups.shape)}")
    per_turn = episode_scores.unsqueeze(-1).expand_as(returns)
    episode = normalize_turns(per_turn, turn_mask, episode_groups.unsqueeze(-1).expand_as(returns), method,
                              mean_type, std_type)
    step = normalize_turns(returns, turn_mask, anchor_group_ids, method)
    return GiGPOAdvantages(fill_masked(episode_weight * episode + step_weight * step, turn_mask), episode, step)


def step_reinforce(returns: Tensor, turn_mask: Tensor, episode_groups: Tensor, method: str,
                   mean_type: str | None = None, std_type: str | None = None) -> Tensor:
    """ROLL's step_reinforce per turn: A_ik = norm(G_ik | episode group) with the pair (method, mean_type,
    std_type); episode_groups [batch]."""
    if episode_groups.shape != returns.shape[:1]:
        raise ValueError(f"episode_groups must have shape ({returns.shape[0]},), got {tuple(episode_groups.shape)}")
    return normalize_turns(returns, turn_mask, episode_groups.unsqueeze(-1).expand_as(returns), method,
                           mean_type, std_type)


def _turn_ends(turn_ids: Tensor) -> Tensor:
    """True at the last token of each turn: a sampled token whose next sampled token (if any) belongs
    to another turn."""
    real = turn_ids >= 0
    ends = torch.zeros_like(real)
    next_turn = torch.full_like(turn_ids[:, 0], -1)
    for t in reversed(range(turn_ids.shape[-1])):
        ends[:, t] = real[:, t] & (turn_ids[:, t] != next_turn)
        next_turn = torch.where(real[:, t], turn_ids[:, t], next_turn)
    return ends


def turn_token_rewards(turn_values: Tensor, turn_ids: Tensor) -> Tensor:
    """Each turn's value [batch, turns] on the turn's last token → [batch, response_len] (0 elsewhere;
    a turn without tokens places nothing)."""
    if turn_ids.dim() != 2 or turn_values.shape[0] != turn_ids.shape[0]:
        raise ValueError(f"turn_values [batch, turns] and turn_ids [batch, response_len] must share the batch; "
                         f"got {tuple(turn_values.shape)} and {tuple(turn_ids.shape)}")
    highest = int(turn_ids.max()) if turn_ids.numel() else -1
    if highest >= turn_values.shape[1]:
        raise ValueError(f"turn_ids name turn {highest}, but turn_values has {turn_values.shape[1]} turns")
    ends = _turn_ends(turn_ids)
    gathered = turn_values.gather(1, turn_ids.clamp(min=0))
    return torch.where(ends, gathered, torch.zeros_like(gathered))


def turn_returns(token_rewards: Tensor, turn_ids: Tensor, gamma: float = 1.0) -> Tensor:
    """Return-to-go inside each turn (gigpo, step_reinforce): A_t = r_t + γ·A_{t'}, t' the next token of
    the same turn (0 after the turn's last token); 0 off the turns."""
    check_same_shape(token_rewards=token_rewards, turn_ids=turn_ids)
    _check_gamma("gamma", gamma)
    real, ends = turn_ids >= 0, _turn_ends(turn_ids)
    rewards = fill_masked(token_rewards, real)
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[-1])):
        carried = torch.where(ends[:, t], torch.zeros_like(running), running)
        running = torch.where(real[:, t], rewards[:, t] + gamma * carried, running)
        out[:, t] = running
    return fill_masked(out, real)


def agentic_reinforce(token_rewards: Tensor, turn_ids: Tensor, gamma: float = 1.0) -> Tensor:
    """ROLL's agentic_reinforce: every token of turn k gets V_k = r_{e_k} + γ·V_{k+1}, e_k the turn's last
    token (module docstring); 0 off the turns."""
    check_same_shape(token_rewards=token_rewards, turn_ids=turn_ids)
    _check_gamma("gamma", gamma)
    real, ends = turn_ids >= 0, _turn_ends(turn_ids)
    rewards = fill_masked(token_rewards, real)
    out = torch.zeros_like(rewards)
    value = torch.zeros_like(rewards[:, 0])  # V of the turn being read (V_{k+1} until e_k is reached)
    for t in reversed(range(rewards.shape[-1])):
        value = torch.where(ends[:, t], rewards[:, t] + gamma * value, value)
        out[:, t] = value
    return fill_masked(out, real)
