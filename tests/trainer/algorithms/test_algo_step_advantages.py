"""ROLL's step-wise agentic estimators (trainer.algorithms.step_advantages): gigpo, step_reinforce and
agentic_reinforce against numbers worked out by hand from GiGPO's formulas (arXiv 2505.10978, Eq. 3-8)
and ROLL's `compute_response_level_rewards` / `compute_agentic_reinforce_return`, and against a
loop reference that scores ROLL's one-row-per-turn batches with dictionaries, as ROLL's group_by does."""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict

import pytest
import torch

from trainer.algorithms.advantages import compute_advantages
from trainer.algorithms.step_advantages import (
    STEP_ADV_ESTIMATORS,
    agentic_reinforce,
    anchor_groups,
    gigpo,
    step_reinforce,
    step_returns,
    turn_returns,
    turn_token_rewards,
)
from trainer.config.schema import AGENTIC_ADV_ESTIMATORS

# Four trajectories. Start-state group 0: trajectories 0-2; group 1: trajectory 3. Observations before
# each reply (anchor states): a, b, c, d; trajectory 3 sees `a` twice (a revisit), in another group.
OBS = [["a", "b", "c"], ["a", "b"], ["a", "d"], ["a", "a"]]
STEPS = [[0.0, 0.0, 1.0], [0.0, -1.0], [-0.1, 0.0], [0.0, 0.2]]  # reward + format penalty of each reply
STATE = torch.tensor([0, 0, 0, 1])
GAMMA_S = 0.5
# G_k = r_k + 0.5 G_k+1, by hand
RETURNS = [[0.25, 0.5, 1.0], [-0.5, -1.0], [-0.1, 0.0], [0.1, 0.2]]
SCORES = torch.tensor([sum(s) for s in STEPS], dtype=torch.float64)  # 1, -1, -0.1, 0.2


def _turns(rows: list[list[float]], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    values = torch.full((len(rows), width), fill, dtype=torch.float64)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        mask[i, : len(row)] = True
    return values, mask


def _anchor_ids() -> torch.Tensor:
    names = {"a": 0, "b": 1, "c": 2, "d": 3}
    ids = torch.full((4, 3), -1, dtype=torch.long)
    for i, row in enumerate(OBS):
        ids[i, : len(row)] = torch.tensor([names[o] for o in row])
    return ids


def _close(got: torch.Tensor, mask: torch.Tensor, want: list[list[float]]) -> None:
    rows = [got[i][mask[i]].tolist() for i in range(got.shape[0])]
    for row, expected in zip(rows, want, strict=True):
        assert row == pytest.approx(expected, abs=1e-9)


def test_the_schema_and_the_algorithms_name_the_same_estimators() -> None:
    assert STEP_ADV_ESTIMATORS == AGENTIC_ADV_ESTIMATORS == ("gigpo", "step_reinforce", "agentic_reinforce")


def test_step_returns_discount_the_later_turns() -> None:
    steps, mask = _turns(STEPS, fill=math.nan)  # padding never leaks
    _close(step_returns(steps, mask, GAMMA_S), mask, RETURNS)
    _close(step_returns(steps, mask, 1.0), mask, [[1.0, 1.0, 1.0], [-1.0, -1.0], [-0.1, 0.0], [0.2, 0.2]])
    with pytest.raises(ValueError, match=r"step_reward_gamma must lie in \[0, 1\], got 1.5"):
        step_returns(steps, mask, 1.5)


def test_anchor_groups_pair_the_start_state_with_the_observation() -> None:
    ids = anchor_groups(STATE, _anchor_ids())
    assert ids[0, 0] == ids[1, 0] == ids[2, 0]  # a, from start-state group 0
    assert ids[0, 1] == ids[1, 1] and ids[0, 1] != ids[0, 0]  # b
    assert ids[3, 0] == ids[3, 1] and ids[3, 0] != ids[0, 0]  # a twice in group 1: not group 0's a
    assert len({int(ids[i, k]) for i, row in enumerate(OBS) for k in range(len(row))}) == 5


def test_gigpo_by_hand_with_mean() -> None:
    """method mean, grouping state, w_E = 1, w_S = 2. Every turn is one entry of its group (ROLL's step
    rows): group 0's episode mean is (3·1 + 2·(−1) + 2·(−0.1)) / 7, not the mean of three scores."""
    returns, mask = _turns(RETURNS)
    out = gigpo(SCORES, returns, mask, STATE, anchor_groups(STATE, _anchor_ids()), "mean", 1.0, 2.0)
    m0 = (3 * 1.0 + 2 * -1.0 + 2 * -0.1) / 7
    episode = [[1 - m0] * 3, [-1 - m0] * 2, [-0.1 - m0] * 2, [0.0, 0.0]]  # group 1: one trajectory, mean = itself
    a = (0.25 - 0.5 - 0.1) / 3  # anchor (0, a): first turns of trajectories 0, 1, 2
    b = (0.5 - 1.0) / 2  # anchor (0, b)
    step = [[0.25 - a, 0.5 - b, 0.0], [-0.5 - a, -1.0 - b], [-0.1 - a, 0.0], [0.1 - 0.15, 0.2 - 0.15]]
    _close(out.episode, mask, episode)
    _close(out.step, mask, step)
    _close(out.advantages, mask, [[e + 2 * s for e, s in zip(er, sr, strict=True)]
                                  for er, sr in zip(episode, step, strict=True)])
    # the numbers: turn advantages of one trajectory differ, as the step term says
    _close(out.advantages, mask, [[1.6190476190, 2.3857142857, 0.8857142857], [-1.8809523810, -2.6142857143],
                                  [-0.1809523810, -0.2142857143], [-0.1, 0.1]])


def test_gigpo_weights_scale_the_two_terms() -> None:
    returns, mask = _turns(RETURNS)
    anchors = anchor_groups(STATE, _anchor_ids())
    full = gigpo(SCORES, returns, mask, STATE, anchors, "mean_std", 1.0, 1.0)
    only_episode = gigpo(SCORES, returns, mask, STATE, anchors, "mean_std", 0.7, 0.0)
    only_step = gigpo(SCORES, returns, mask, STATE, anchors, "mean_std", 0.0, 3.0)
    torch.testing.assert_close(only_episode.advantages, 0.7 * full.episode)
    torch.testing.assert_close(only_step.advantages, 3.0 * full.step)


def test_step_reinforce_by_hand_with_mean_std_over_the_batch() -> None:
    """Every real turn's return standardised over the batch's turns: (G − μ) / (σ + 1e-6), σ the sample
    standard deviation (statistics.stdev)."""
    returns, mask = _turns(RETURNS)
    flat = [g for row in RETURNS for g in row]
    mu, sigma = statistics.mean(flat), statistics.stdev(flat)
    got = step_reinforce(returns, mask, torch.zeros(4, dtype=torch.long), "mean_std")
    _close(got, mask, [[(g - mu) / (sigma + 1e-6) for g in row] for row in RETURNS])
    assert got[~mask].abs().sum() == 0


def roll_gigpo_reference(obs: list[list[str]], steps: list[list[float]], state: list[int], gamma: float,
                    method: str, w_e: float, w_s: float) -> dict[tuple[int, int], float]:
    """ROLL's gigpo on one row per turn (StepEnvManager) → {(trajectory, turn): advantage}: discounted step
    scores per trajectory, then ROLL's normalisation functions over group_by(traj_group_id) and
    group_by(traj_group_id, state_hash). Also the agentic pipeline test's reference."""
    rows = []
    for i, (o, r) in enumerate(zip(obs, steps, strict=True)):
        g, running = [0.0] * len(r), 0.0
        for k in reversed(range(len(r))):
            running = r[k] + gamma * running
            g[k] = running
        rows += [{"key": (i, k), "group": state[i], "state": o[k], "episode": sum(r), "step": g[k]}
                 for k in range(len(r))]

    def norm(values: list[float]) -> list[float]:
        mean = sum(values) / len(values)
        std = statistics.stdev(values) if len(values) > 1 else math.nan
        if method == "mean":
            return [v - mean for v in values]
        if len(values) > 1 and std > 1e-6:
            return [(v - mean) / (std + 1e-6) for v in values]
        return [0.0] * len(values)

    def grouped(by: str, value: str) -> dict[tuple[int, int], float]:
        groups = defaultdict(list)
        for row in rows:
            groups[tuple(row[b] for b in by.split("+"))].append(row)
        out = {}
        for members in groups.values():
            out |= dict(zip([m["key"] for m in members], norm([m[value] for m in members]), strict=True))
        return out

    episode, step = grouped("group", "episode"), grouped("group+state", "step")
    return {key: w_e * episode[key] + w_s * step[key] for key in episode}


@pytest.mark.parametrize("method", ["mean", "mean_std"])
@pytest.mark.parametrize("seed", range(5))
def test_gigpo_matches_the_step_row_reference(method: str, seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 9)
    state = [rng.randrange(3) for _ in range(n)]
    lengths = [rng.randint(1, 5) for _ in range(n)]
    obs = [[rng.choice("abc") for _ in range(k)] for k in lengths]
    steps = [[rng.choice([0.0, -0.1, 1.0, 0.5]) for _ in range(k)] for k in lengths]
    gamma, w_e, w_s = rng.random(), rng.random() * 2, rng.random() * 2
    want = roll_gigpo_reference(obs, steps, state, gamma, method, w_e, w_s)

    scores, mask = _turns(steps, fill=math.inf)
    names = {"a": 0, "b": 1, "c": 2}
    anchors, _ = _turns([[float(names[o]) for o in row] for row in obs], fill=-1)
    states = torch.tensor(state)
    got = gigpo(scores.nan_to_num(posinf=0.0).sum(-1), step_returns(scores, mask, gamma), mask, states,
                anchor_groups(states, anchors.long()), method, w_e, w_s).advantages
    for (i, k), value in want.items():
        assert float(got[i, k]) == pytest.approx(value, abs=1e-9), (i, k)
    assert got[~mask].abs().sum() == 0


# one row: reply 0 (2 tokens) | observation (2) | reply 1 (3 tokens) | padding
TURN_IDS = torch.tensor([[0, 0, -1, -1, 1, 1, 1, -1]])


def test_turn_values_sit_on_each_turns_last_token() -> None:
    placed = turn_token_rewards(torch.tensor([[2.0, -1.0]]), TURN_IDS)
    assert placed.tolist() == [[0.0, 2.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0]]
    with pytest.raises(ValueError, match="turn_ids name turn 1, but turn_values has 1 turns"):
        turn_token_rewards(torch.tensor([[2.0]]), TURN_IDS)


def test_turn_returns_restart_at_every_turn() -> None:
    """ROLL's reinforce return on a one-turn row: each turn's value does not flow into earlier turns."""
    placed = turn_token_rewards(torch.tensor([[2.0, -1.0]]), TURN_IDS)
    assert turn_returns(placed, TURN_IDS, 1.0).tolist() == [[2.0, 2.0, 0.0, 0.0, -1.0, -1.0, -1.0, 0.0]]
    assert turn_returns(placed, TURN_IDS, 0.5).tolist() == [[1.0, 2.0, 0.0, 0.0, -0.25, -0.5, -1.0, 0.0]]
    kl = torch.where(TURN_IDS >= 0, -0.1, 0.0)  # −β·kl on every sampled token
    got = turn_returns(placed + kl, TURN_IDS, 1.0)
    assert got[0].tolist() == pytest.approx([1.8, 1.9, 0.0, 0.0, -1.3, -1.2, -1.1, 0.0])


def test_agentic_reinforce_discounts_once_per_later_turn() -> None:
    """ROLL's compute_agentic_reinforce_return: turn k of n gets γ^(n−k)·R from the reward R on the last
    token; only a turn's last token is read (the KL of other tokens is not)."""
    turns = torch.tensor([[0, 0, -1, 1, -1, 2, 2, -1]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]])
    got = agentic_reinforce(rewards, turns, 0.9)
    assert got[0].tolist() == pytest.approx([0.81, 0.81, 0.0, 0.9, 0.0, 1.0, 1.0, 0.0])
    kl = torch.where(turns >= 0, -0.1, 0.0)
    got = agentic_reinforce(rewards + kl, turns, 0.9)
    v2 = 0.9
    v1 = -0.1 + 0.9 * v2
    v0 = -0.1 + 0.9 * v1
    assert got[0].tolist() == pytest.approx([v0, v0, 0.0, v1, 0.0, v2, v2, 0.0])


def test_compute_advantages_dispatches_the_step_estimators() -> None:
    mask = (TURN_IDS >= 0).float()
    placed = turn_token_rewards(torch.tensor([[2.0, -1.0]]), TURN_IDS)
    for name in ("gigpo", "step_reinforce"):
        got = compute_advantages(name, placed, mask, turn_ids=TURN_IDS, gamma=0.5)
        assert torch.equal(got.advantages, turn_returns(placed, TURN_IDS, 0.5)) and got.returns is got.advantages
    got = compute_advantages("agentic_reinforce", placed, mask, turn_ids=TURN_IDS, gamma=0.5)
    assert torch.equal(got.advantages, agentic_reinforce(placed, TURN_IDS, 0.5))
    with pytest.raises(ValueError, match="adv_estimator 'gigpo' needs `turn_ids`"):
        compute_advantages("gigpo", placed, mask)
    with pytest.raises(ValueError, match=r"valid: gae, .*, gigpo, step_reinforce, agentic_reinforce"):
        compute_advantages("starpo", placed, mask)
