"""ROLL's step-wise estimators in agentic runs (examples/agentic_grid_cpu.yaml, one step of 16 FrozenLake
trajectories on the tiny model): the advantages the actor trains on, read back per turn from the
rollout telemetry, equal the formulas computed from the same trajectories' turns (rewards, penalties,
observations); step_reward_weight changes them (disconnect check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.algorithms.test_algo_step_advantages import roll_gigpo_reference
from tests.trainer.pipeline.conftest import REPO_ROOT, events, metrics_by_step, run_local

AGENTIC = REPO_ROOT / "examples" / "agentic_grid_cpu.yaml"
ONE_STEP = (
    "rollout_batch_size=16",
    "train_env_manager.env_groups=4",
    "train_env_manager.n_groups=[4]",
    "actor_train.training_args.per_device_train_batch_size=16",
    "val_batch_size=8",
    "val_env_manager.env_groups=8",
    "max_steps=1",
    "eval_steps=0",
    "save_steps=100",
    "render_save_dir=null",
    "track_with=none",
    "reward_normalization.grouping=state",
    "reward_normalization.method=mean",
    "seed=3",
)


def play(out: Path, *overrides: str) -> list[dict[str, Any]]:
    """One training step; its 16 trajectories as telemetry samples, each with `turn_advantages`: the
    advantage on every sampled token of each reply, turn by turn."""
    from trainer.config import load_config

    cfg = load_config(AGENTIC, [f"output_dir={out}", f"logging_dir={out}/logs", *ONE_STEP, *overrides])
    assert run_local(cfg) == 0
    (event,) = events(out, "rollouts")
    samples = event["data"]["samples"]
    assert len(samples) == 16
    for s in samples:
        runs: list[list[float]] = []
        previous = 0
        for adv, sampled in zip(s["token_advantages"], s["token_mask"], strict=True):
            if sampled:
                if not previous:
                    runs.append([])
                runs[-1].append(adv)
            previous = sampled
        assert len(runs) == s["num_turns"]
        s["turn_advantages"] = runs
    return samples


def replies(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in s["turns"] if t["role"] == "assistant"]


def gigpo_expected(samples: list[dict[str, Any]], w_e: float, w_s: float) -> dict[tuple[int, int], float]:
    """GiGPO from the turns: the user turn before reply k is its anchor observation (env_instruction is
    empty in the example, so the first user turn is the first observation itself)."""
    obs = [[t["text"] for t in s["turns"][0::2][: s["num_turns"]]] for s in samples]
    steps = [[t["reward"] + t["penalty"] for t in replies(s)] for s in samples]
    return roll_gigpo_reference(obs, steps, [s["group_id"] for s in samples], 0.95, "mean", w_e, w_s)


def assert_turns(samples: list[dict[str, Any]], expected: dict[tuple[int, int], float]) -> None:
    for i, s in enumerate(samples):
        for k, tokens in enumerate(s["turn_advantages"]):
            assert tokens == pytest.approx([expected[i, k]] * len(tokens), abs=2e-5), (i, k)


def test_gigpo_trains_on_each_turns_advantage(tmp_path: Path) -> None:
    with_steps = play(tmp_path / "gigpo", "adv_estimator=gigpo", "step_reward_weight=1.0")
    assert_turns(with_steps, gigpo_expected(with_steps, 1.0, 1.0))
    # turns of one trajectory differ as the step term says (early format errors: returns of penalties)
    assert any(len({round(t[0], 4) for t in s["turn_advantages"]}) > 1 for s in with_steps)
    metrics = metrics_by_step(tmp_path / "gigpo")[1]
    assert metrics["system/state_batch_size/max"] >= metrics["system/state_batch_size/mean"] > 1

    # disconnect check: the same trajectories (same seed, same initial weights) with the step term off
    episode_only = play(tmp_path / "episode", "adv_estimator=gigpo", "step_reward_weight=0.0")
    assert [s["tokens"] for s in episode_only] == [s["tokens"] for s in with_steps]
    assert_turns(episode_only, gigpo_expected(episode_only, 1.0, 0.0))
    assert [s["turn_advantages"] for s in episode_only] != [s["turn_advantages"] for s in with_steps]


def test_step_reinforce_and_agentic_reinforce_per_turn(tmp_path: Path) -> None:
    """step_reinforce: the turn's step return (γ_s = 0.95) minus its start-state group's mean over all
    its turns; agentic_reinforce: the trajectory's group-centred score, times γ per later turn."""
    samples = play(tmp_path / "step", "adv_estimator=step_reinforce")
    returns = []
    for s in samples:
        g, running = [], 0.0
        for t in reversed(replies(s)):
            running = t["reward"] + t["penalty"] + 0.95 * running
            g.insert(0, running)
        returns.append(g)
    means = {}
    for group in {s["group_id"] for s in samples}:
        members = [g for s, row in zip(samples, returns, strict=True) if s["group_id"] == group for g in row]
        means[group] = sum(members) / len(members)
    assert_turns(samples, {(i, k): g - means[s["group_id"]] for i, (s, row) in enumerate(zip(samples, returns,
                                                                                              strict=True))
                           for k, g in enumerate(row)})

    samples = play(tmp_path / "agentic", "adv_estimator=agentic_reinforce", "gamma=0.9")
    centred = {}
    for group in {s["group_id"] for s in samples}:
        scores = [s["reward"] for s in samples if s["group_id"] == group]
        centred[group] = sum(scores) / len(scores)
    assert_turns(samples, {(i, k): 0.9 ** (s["num_turns"] - 1 - k) * (s["reward"] - centred[s["group_id"]])
                           for i, s in enumerate(samples) for k in range(s["num_turns"])})
