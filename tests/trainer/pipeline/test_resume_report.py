"""The resume report (trainer.pipeline.run.resume_report): a normal resume's numbers, and resumes that do not add
up (a tampered data position, a ledger that lost a prompt, a checkpoint not found) failing with the report
naming what is wrong instead of training on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import events, load_cfg, run_local
from trainer.pipeline.run.ledger import read_ledger
from trainer.pipeline.run.resume_report import REPORTS_FILE, no_checkpoint

# conftest's FAST shape: 4 prompts x 4 samples a step; 16 samples in optimizer steps of 4 x 2 = 8 samples,
# twice (ppo_epochs=2): 4 optimizer (and scheduler) steps per training step
PROMPTS_PER_STEP, OPTIMIZER_STEPS_PER_STEP = 4, 2 * 2
COMMON = ("seed=5", "eval_steps=0", "save_steps=1")


def two_steps(tmp_path: Path) -> Path:
    """A run of two steps with a checkpoint after each (in place: a copied run directory would be another
    run, whose checkpoints name the original's ledger)."""
    out = tmp_path / "run"
    assert run_local(load_cfg(out, *COMMON, "max_steps=2")) == 0
    return out


def resume(out: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    """Resume `out` to step 3 with `latest`; (exit code, the reports it wrote)."""
    code = run_local(load_cfg(out, *COMMON, "max_steps=3", "resume_from_checkpoint=latest", *extra))
    path = out / REPORTS_FILE
    reports = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return code, reports


def failure_message(out: Path) -> str:
    return [e for e in events(out, "status") if e["data"]["state"] == "failed"][-1]["data"]["message"]


def test_a_normal_resume_reports_what_it_restored(tmp_path: Path) -> None:
    out = two_steps(tmp_path)
    code, reports = resume(out)
    assert code == 0
    [report] = reports
    assert report["ok"] and report["problems"] == []
    assert report["checkpoint"] == str(out / "checkpoints" / "step_2") and report["step"] == 2
    # 2 steps x 4 prompts drawn from a 64-prompt epoch: epoch 0, index 8
    assert report["data"] == {"epoch": 0, "index": 2 * PROMPTS_PER_STEP, "position": 2 * PROMPTS_PER_STEP,
                              "next_batch": 3, "ledger_position": 2 * PROMPTS_PER_STEP}
    ledger = report["ledger"]
    assert (ledger["prompts_drawn"], ledger["prompts_trained"], ledger["prompts_in_flight"]) == (8, 8, 0)
    assert (ledger["samples_dropped_stale"], ledger["lost"], ledger["duplicated"]) == (0, 0, 0)
    assert report["optimizer"]["actor_train"] == {"optimizer_step": 2 * OPTIMIZER_STEPS_PER_STEP,
                                                  "scheduler_step": 2 * OPTIMIZER_STEPS_PER_STEP}
    assert report["rng"]["driver"] is True and report["rng"]["actor_train"] == [0]
    assert report["rng"]["actor_infer"] == [0]
    assert report["kl"]["type"] in ("FixedKLController", "AdaptiveKLController") and "value" in report["kl"]
    # the same report travelled as a `resume` event, with the run's fingerprint before it
    [event] = [e for e in events(out, "resume")]
    assert event["data"] == report
    assert len(events(out, "fingerprint")) == 2  # one per attempt: the base run's and the resume's


@pytest.mark.parametrize(("shift", "named"), [(+2, "data position skipped ahead"),
                                              (-4, "data position moved backwards")])
def test_a_tampered_data_position_fails_the_resume(tmp_path: Path, shift: int, named: str) -> None:
    out = two_steps(tmp_path)
    state_file = out / "checkpoints" / "step_2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["sampler"]["index"] += shift
    state_file.write_text(json.dumps(state))
    code, reports = resume(out)
    assert code == 1
    [report] = reports
    assert not report["ok"] and any(named in p for p in report["problems"]), report["problems"]
    position = 2 * PROMPTS_PER_STEP + shift
    assert report["data"]["position"] == position and report["data"]["ledger_position"] == 8
    message = failure_message(out)
    assert "ResumeError" in message and named in message
    assert 3 not in {e["step"] for e in events(out, "metrics")}  # it never trained on


def test_a_ledger_that_lost_a_prompt_fails_the_resume(tmp_path: Path) -> None:
    out = two_steps(tmp_path)
    ledger = out / "ledger.jsonl"
    lines = ledger.read_text().split("\n")
    records, _ = read_ledger(ledger)
    first_train = next(i for i, r in enumerate(records) if r and r["ev"] == "train" and r["batch"] == 1)
    lines[first_train] = "{torn"  # batch 1's training record unreadable: its prompts were never trained
    ledger.write_text("\n".join(lines))
    code, reports = resume(out)
    assert code == 1
    [report] = reports
    assert report["ledger"]["lost"] == PROMPTS_PER_STEP
    assert any("lost" in p and "batch 1 never trained" in p for p in report["problems"]), report["problems"]
    assert "batch 1 never trained" in failure_message(out)
    assert 3 not in {e["step"] for e in events(out, "metrics")}


def test_a_checkpoint_not_found_after_training_fails_instead_of_starting_over(tmp_path: Path) -> None:
    out = two_steps(tmp_path)
    for marker in (out / "checkpoints").glob("step_*/COMPLETE"):
        marker.unlink()  # saves that never finished, as an interrupted async save leaves them
    code, reports = resume(out)
    assert code == 1
    [report] = reports
    assert report["checkpoint"] is None
    [problem] = report["problems"]
    assert "checkpoint not found" in problem and "step_1, step_2 without their COMPLETE marker" in problem
    assert "records checkpoint(s) of step 1, 2 saved" in problem
    assert "checkpoint not found" in failure_message(out)


def test_latest_without_any_earlier_training_starts_fresh_and_says_so(tmp_path: Path) -> None:
    report = no_checkpoint("latest", tmp_path / "checkpoints", tmp_path / "ledger.jsonl")
    assert report.ok and "started fresh" in report.notes[0]
    # killed at step 2, before its first save: nothing was checkpointed, so starting over loses nothing
    (tmp_path / "ledger.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"ev": "start", "position": 0}, {"ev": "draw", "batch": 1, "prompts": [0, 1], "from": 0, "to": 2},
        {"ev": "train", "batch": 1, "step": 1, "staleness": 0, "samples": 4}]) + "\n")
    report = no_checkpoint("latest", tmp_path / "checkpoints", tmp_path / "ledger.jsonl")
    assert report.ok and "steps up to 1, never checkpointed, are redone" in report.notes[0]
    missing = no_checkpoint("/nowhere/step_3", tmp_path / "checkpoints", tmp_path / "ledger.jsonl",
                            error="/nowhere/step_3 is not a finished checkpoint directory")
    assert not missing.ok and "checkpoint not found: /nowhere/step_3" in missing.problems[0]
