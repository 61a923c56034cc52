"""Atomic checkpoint directories, `latest` resolution, retention and RNG capture."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import core


def save(run: Path, step: int) -> Path:
    with core.atomic_checkpoint_dir(run / "checkpoints", step) as tmp:
        (tmp / "trainer_state.json").write_text(str(step))
    return run / "checkpoints" / f"step_{step}"


def test_crash_mid_save_leaves_nothing_resume_would_pick(tmp_path: Path) -> None:
    save(tmp_path, 2)
    with pytest.raises(RuntimeError, match="disk full"), core.atomic_checkpoint_dir(tmp_path / "checkpoints", 4) as tmp:
        (tmp / "model.pt").write_text("half")
        raise RuntimeError("disk full")
    assert not (tmp_path / "checkpoints" / "step_4").exists()
    assert [s for s, _ in core.list_checkpoints(tmp_path / "checkpoints")] == [2]
    assert core.resolve_resume_path("latest", tmp_path / "checkpoints") == tmp_path / "checkpoints" / "step_2"
    # a save killed before its rename (no COMPLETE marker, tmp name) is ignored as well
    (tmp_path / "checkpoints" / ".tmp-step_6-123").mkdir()
    (tmp_path / "checkpoints" / "step_8").mkdir()  # a directory without COMPLETE is not a checkpoint
    assert core.resolve_resume_path(True, tmp_path / "checkpoints") == tmp_path / "checkpoints" / "step_2"
    save(tmp_path, 10)
    assert not (tmp_path / "checkpoints" / ".tmp-step_6-123").exists()  # stale tmp dirs cleaned up


def test_resolve_resume_path_values(tmp_path: Path) -> None:
    assert core.resolve_resume_path(False, tmp_path / "checkpoints") is None
    assert core.resolve_resume_path("latest", tmp_path / "checkpoints") is None  # nothing yet: fresh start, as ROLL
    path = save(tmp_path, 3)
    assert core.resolve_resume_path(str(path), tmp_path / "checkpoints") == path
    assert core.resolve_resume_path("true", tmp_path / "checkpoints") == path
    with pytest.raises(FileNotFoundError, match="resume_from_checkpoint"):
        core.resolve_resume_path(str(tmp_path / "nope"), tmp_path / "checkpoints")


def test_retention_keeps_newest(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        save(tmp_path, step)
    removed = core.enforce_retention(tmp_path / "checkpoints", 2)
    assert [p.name for p in removed] == ["step_1", "step_2"]
    assert [s for s, _ in core.list_checkpoints(tmp_path / "checkpoints")] == [3, 4]
    assert core.enforce_retention(tmp_path / "checkpoints", -1) == []
    assert core.checkpoint_size(tmp_path / "checkpoints" / "step_4") > 0



def test_checkpoints_are_ordered_by_step_number_not_folder_name(tmp_path: Path) -> None:
    """step_10 is newer than step_9 (as text it sorts first): latest resumes step_10, retention deletes
    the oldest steps and keeps step_10."""
    for step in (8, 9, 10):
        save(tmp_path, step)
    root = tmp_path / "checkpoints"
    assert [s for s, _ in core.list_checkpoints(root)] == [8, 9, 10]
    assert core.resolve_resume_path("latest", root) == root / "step_10"
    assert [p.name for p in core.enforce_retention(root, 2)] == ["step_8"]
    assert sorted(p.name for p in root.iterdir()) == ["step_10", "step_9"]

def test_rng_state_roundtrip() -> None:
    state = core.get_rng_state()
    first = (random.random(), torch.rand(3))
    core.set_rng_state(state)
    second = (random.random(), torch.rand(3))
    assert first[0] == second[0] and torch.equal(first[1], second[1])


def test_checkpoints_root_follows_checkpoint_config(tmp_path: Path) -> None:
    from trainer.config import PipelineConfig

    assert core.checkpoints_root(PipelineConfig(output_dir=str(tmp_path))) == tmp_path / "checkpoints"
    cfg = PipelineConfig(output_dir=str(tmp_path), checkpoint_config={"output_dir": str(tmp_path / "ck")})
    assert core.checkpoints_root(cfg) == tmp_path / "ck"
