"""The agentic pipeline with rollout_mode one_step_off (ROLL: async_generation_ratio 1) on the tiny model
(examples/agentic_grid_cpu.yaml, shrunk): the producer plays batch j+1's episodes while step j trains, every
trained trajectory carries the policy version that played it (lag ≤ 1, 0 at step 1), a resumed run accounts for
every batch, and a checkpoint's played batch survives the JSON round trip."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from tests.trainer.pipeline.conftest import events, metrics_by_step, run_local
from tests.trainer.pipeline.test_agentic_pipeline import SMALL, load
from trainer.envs.manager import Episode, TurnLimits
from trainer.pipeline.agentic import AgenticRollout
from trainer.pipeline.run.ledger import account, read_ledger
from trainer.pipeline.trajectory import Step, Trajectory

# actor_infer on its own device: playing batch j+1 overlaps training step j (a shared device takes turns)
ONE_STEP_OFF = (
    *SMALL,
    "async_generation_ratio=1",
    "actor_infer.device_mapping=[1]",
    "eval_steps=0",
    "seed=3",
)


def trained(out: Path) -> dict[int, dict[str, Any]]:
    """The ledger's train record of each step (the last attempt's, after a resume)."""
    return {
        r["step"]: r for r in read_ledger(out / "ledger.jsonl")[0] if r is not None and r["ev"] == "train"
    }


def test_one_step_off_trains_each_trajectory_at_most_one_version_behind(tmp_path: Path) -> None:
    assert run_local(load(tmp_path, *ONE_STEP_OFF, "max_steps=3", "save_steps=100")) == 0
    records = trained(tmp_path)
    assert sorted(records) == [1, 2, 3]
    assert (
        records[1]["version"] == 0 and records[1]["staleness"] == 0
    )  # nothing trained before the first batch
    for step, record in records.items():
        assert record["batch"] == step and record["staleness"] == step - 1 - record["version"] <= 1
    # generation ran ahead of training (not a silent sync): some batch was played by the previous policy
    assert max(r["staleness"] for r in records.values()) == 1
    for event in events(tmp_path, "rollouts"):  # every logged trajectory names the policy that played it
        assert {s["policy_version"] for s in event["data"]["samples"]} == {records[event["step"]]["version"]}
    metrics = metrics_by_step(tmp_path)
    assert all(m["actor/grad_norm"] > 0 and "async/training_idle_s" in m for m in metrics.values())
    assert account(read_ledger(tmp_path / "ledger.jsonl")[0]).ok


def unrendered(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "render_path"} for s in samples]


def test_a_resumed_one_step_off_run_retrains_the_buffered_batch_exactly(tmp_path: Path) -> None:
    """The step-2 checkpoint holds batch 3, played ahead by policy 1; resumed there (step 3's checkpoint removed),
    the run trains that same batch to the same metrics and trajectories, and the ledger accounts for every batch.
    (A batch still in flight at the checkpoint is re-queued and replayed by policy 2: then only the accounting
    and the lag are checked.)"""
    common = (*ONE_STEP_OFF, "max_steps=3", "save_steps=2")
    assert run_local(load(tmp_path, *common)) == 0
    first = {k: v for k, v in metrics_by_step(tmp_path)[3].items() if not k.startswith(("timing/", "async/"))}
    first_samples = [e["data"]["samples"] for e in events(tmp_path, "rollouts") if e["step"] == 3]
    buffered = json.loads((tmp_path / "checkpoints" / "step_2" / "rollout_buffer.json").read_text())
    shutil.rmtree(tmp_path / "checkpoints" / "step_3")
    assert run_local(load(tmp_path, *common, "resume_from_checkpoint=latest")) == 0
    again = {k: v for k, v in metrics_by_step(tmp_path)[3].items() if not k.startswith(("timing/", "async/"))}
    samples = [e["data"]["samples"] for e in events(tmp_path, "rollouts") if e["step"] == 3]
    records = trained(tmp_path)
    assert sorted(records) == [1, 2, 3] and all(r["staleness"] <= 1 for r in records.values())
    accounting = account(read_ledger(tmp_path / "ledger.jsonl")[0])
    assert accounting.ok, (accounting.lost, accounting.duplicated, accounting.problems)
    if buffered:
        assert [(b["batch"], b["version"], len(b["trajectories"])) for b in buffered] == [(3, 1, 16)]
        assert records[3]["version"] == 1
        assert {k: (first[k], again[k]) for k in first if abs(first[k] - again[k]) > 1e-6} == {}
        assert unrendered(samples[-1]) == unrendered(first_samples[0])  # token for token


def test_a_played_batch_survives_the_checkpoint_round_trip() -> None:
    episode = Episode(env_id=1, group_id=0, sample_index=1, round=0, tag="Lake", seed=42, state_id=0)
    trajectory = Trajectory(
        episode,
        TurnLimits(3, None, 4),
        [1, 2],
        [5, 6, 7],
        [1, 1, 0],
        [-0.5, -0.25, 0.0],
        [0, 0, -1],
        rewards=[1.0],
        done_reason="success",
        success=True,
        turns=[{"role": "assistant", "text": "R", "reward": 1.0, "penalty": 0.0}],
        steps=[Step([1, 2], [5, 6], [-0.5, -0.25])],
    )
    rollout = AgenticRollout(
        2, [16, 17], 1, [], [], torch.zeros(0), generate_s=1.5, trajectories=[trajectory]
    )
    back = AgenticRollout.from_state(json.loads(json.dumps(rollout.to_state())))
    assert back.trajectories == [trajectory] and back.samples == 1
    assert (back.batch_id, back.prompt_indices, back.version, back.generate_s) == (2, [16, 17], 1, 1.5)
