"""The agentic pipeline end to end on the tiny model (examples/agentic_grid_cpu.yaml): it learns, a
resumed run reproduces the uninterrupted one, and each trajectory reaches telemetry turn by turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, metrics_by_step, run_local

AGENTIC = REPO_ROOT / "examples" / "agentic_grid_cpu.yaml"
# 16 trajectories (4 start states x 4), two optimizer steps per rollout and two PPO epochs: old
# log-probs are recomputed, so the resume must restore the optimizer and every RNG exactly
SMALL = (
    "rollout_batch_size=16",
    "train_env_manager.env_groups=4",
    "train_env_manager.n_groups=[4]",
    "val_batch_size=8",
    "val_env_manager.env_groups=8",
    "ppo_epochs=2",
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=2",
)


def load(out: Path, *overrides: str) -> Any:
    from trainer.config import load_config

    return load_config(
        AGENTIC,
        [
            f"output_dir={out}",
            f"logging_dir={out}/logs",
            f"render_save_dir={out}/render",
            "track_with=none",
            *overrides,
        ],
    )


def test_shortened_agentic_example_learns(tmp_path: Path) -> None:
    """A random tiny model first learns the reply format (a move letter), then to reach the goal. The
    example (200 steps of 32 trajectories) halved: 100 steps of 16 (about 35 s here)."""
    cfg = load(
        tmp_path,
        "max_steps=100",
        "eval_steps=100",
        "save_steps=1000",
        "render_save_dir=null",
        "rollout_batch_size=16",
        "train_env_manager.env_groups=4",
        "train_env_manager.n_groups=[4]",
        "actor_train.training_args.per_device_train_batch_size=16",
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)

    def mean(key: str, steps: range) -> float:
        return sum(metrics[s][key] for s in steps) / len(steps)

    first, last = range(1, 11), range(91, 101)
    assert mean("env/format_error_rate", first) > 0.8 and mean("env/format_error_rate", last) < 0.1
    assert mean("reward/mean", first) < -0.4 and mean("reward/mean", last) > mean("reward/mean", first) + 0.6
    assert mean("env/success", first) == 0.0 and mean("env/success", last) > 0.2
    assert metrics[100]["eval/success"] > 0.15  # sampled, on the 32 fixed evaluation start states


@pytest.mark.parametrize("method", ["identity", "mean"])
def test_reward_normalization_acts_on_the_scores(tmp_path: Path, method: str) -> None:
    """identity leaves the scores as they are; mean over the batch centres them exactly."""
    assert (
        run_local(
            load(
                tmp_path,
                *SMALL,
                "max_steps=1",
                "eval_steps=0",
                "save_steps=1",
                "reward_normalization.grouping=batch",
                f"reward_normalization.method={method}",
            )
        )
        == 0
    )
    metrics = metrics_by_step(tmp_path)[1]
    want = metrics["reward/mean"] if method == "identity" else 0.0
    assert (
        metrics["reward/normalized_mean"] == pytest.approx(want, abs=1e-6) and metrics["reward/mean"] < -0.3
    )


def test_resumed_agentic_run_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    common = (*SMALL, "max_steps=4", "eval_steps=2", "save_steps=2", "seed=5")
    full, cut = tmp_path / "full", tmp_path / "cut"
    assert run_local(load(full, *common)) == 0
    assert run_local(load(cut, *common, "max_steps=2")) == 0
    assert run_local(load(cut, *common, "resume_from_checkpoint=latest")) == 0

    a, b = metrics_by_step(full), metrics_by_step(cut)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in a[step] if not k.startswith("timing/")}
        assert keys == {k for k in b[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "reward/mean", "env/success", "actor/approx_kl"} <= keys
        mismatched = {k: (a[step][k], b[step][k]) for k in keys if abs(a[step][k] - b[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    assert "eval/success" in a[4] and _samples(full, 4) == _samples(
        cut, 4
    )  # the same trajectories, token for token
    assert a[4]["actor/grad_norm"] > 0 and a[3]["actor/pg_loss"] != a[4]["actor/pg_loss"]
    state = json.loads((cut / "checkpoints" / "step_2" / "trainer_state.json").read_text())
    assert state["sampler"] == {
        "name": "train_env_manager",
        "tags": ["FrozenLake"] * 4,
        "group_size": 4,
        "batch_size": 16,
        "position": 32,
    }


def test_trajectories_reach_telemetry_turn_by_turn(tmp_path: Path) -> None:
    from trainer.telemetry.events import parse_event, rollouts_data

    assert run_local(load(tmp_path, *SMALL, "max_steps=1", "eval_steps=0", "save_steps=1")) == 0
    (event,) = [e for e in events(tmp_path, "rollouts")]
    parse_event(event)
    samples = rollouts_data(event["data"]["samples"])["samples"]
    assert len(samples) == 16 and {s["group_id"] for s in samples} == {0, 1, 2, 3}
    for s in samples:
        n = s["response_length"]
        assert (
            len(s["tokens"])
            == len(s["token_mask"])
            == len(s["token_advantages"])
            == len(s["token_logprobs"])
            == n
        )
        assert all(adv == 0.0 for adv, m in zip(s["token_advantages"], s["token_mask"], strict=True) if not m)
        turns = s["turns"]
        assert [t["role"] for t in turns] == ["user", "assistant"] * s["num_turns"] + ["user"]
        assert sum(t["tokens"] for t in turns[1:]) == n and turns[0]["tokens"] == s["prompt_length"]
        assert sum(t["tokens"] for t in turns if t["loss"]) == sum(s["token_mask"])
        assert s["reward"] == sum(t["reward"] + t["penalty"] for t in turns if t["role"] == "assistant")
        assert s["stop_reason"] == s["done_reason"] and s["env_tag"] == "FrozenLake"
        frames = Path(s["render_path"]).read_text()
        assert frames.startswith("# reset\n") and frames.count("# after reply") == s["num_turns"]
        assert Path(s["render_path"]).is_relative_to(tmp_path / "render" / "step_1")


def test_tool_use_and_sokoban_example_runs_with_two_env_tags(tmp_path: Path) -> None:
    """examples/agentic_tools_cpu.yaml: the calculator and Sokoban side by side (the tiny model only
    collects format penalties; this checks the plumbing, not learning)."""
    from trainer.config import load_config

    cfg = load_config(
        REPO_ROOT / "examples" / "agentic_tools_cpu.yaml",
        [
            f"output_dir={tmp_path}",
            f"logging_dir={tmp_path}/logs",
            "render_save_dir=null",
            "track_with=none",
            "max_steps=1",
            "eval_steps=1",
            "save_steps=1000",
        ],
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)[1]
    for prefix in ("env", "eval"):
        assert {f"{prefix}/Calculator/success", f"{prefix}/SimpleSokoban/success"} <= set(metrics)
    (event,) = events(tmp_path, "rollouts")
    samples = event["data"]["samples"]
    assert [s["env_tag"] for s in samples] == ["Calculator"] * 4 + ["SimpleSokoban"] * 4
    assert samples[0]["turns"][0]["text"].startswith("Answer the arithmetic question.")
    # a group shares its start state: one question, one room
    assert (
        len({s["turns"][0]["text"] for s in samples[:4]})
        == len({s["turns"][0]["text"] for s in samples[4:]})
        == 1
    )


def _samples(out: Path, step: int) -> list[dict]:
    """The step's rollout samples, their frame files' path made relative to the run directory."""
    samples = [s for e in events(out, "rollouts") if e["step"] == step for s in e["data"]["samples"]]
    return [{**s, "render_path": str(Path(s["render_path"]).relative_to(out))} for s in samples]
