"""The supervisor's rules, as pure functions (no Django, Celery or Ray)."""

from __future__ import annotations

import shlex

import pytest

from policylab.jobs.transitions import (
    FAILED,
    MISSING,
    PENDING,
    RUNNING,
    STOPPED,
    SUCCEEDED,
    next_step,
    resume_for_attempt,
    submission_id,
    trainer_entrypoint,
)


def step(status: str, **kw):
    kw.setdefault("cancel_requested", False)
    kw.setdefault("retries_used", 0)
    kw.setdefault("max_retries", 2)
    return next_step(status, job_id="policylab-run7-a1", **kw)


def test_active_job_states_keep_waiting_with_matching_statuses() -> None:
    assert (step(PENDING).action, step(PENDING).run_status) == ("wait", "submitting")
    assert (step(RUNNING).action, step(RUNNING).run_status, step(RUNNING).attempt_status) == ("wait", "running", "running")


def test_success_finishes_even_when_a_cancel_came_too_late() -> None:
    assert step(SUCCEEDED).run_status == "succeeded"
    assert step(SUCCEEDED, cancel_requested=True).run_status == "succeeded"


def test_cancel_stops_a_live_job_then_finishes_cancelled() -> None:
    assert step(RUNNING, cancel_requested=True).action == "stop_job"
    assert step(PENDING, cancel_requested=True).action == "stop_job"
    for ended in (STOPPED, FAILED, MISSING):
        done = step(ended, cancel_requested=True)
        assert (done.action, done.run_status, done.attempt_status) == ("finish", "cancelled", "cancelled")


def test_stop_outside_policylab_is_reported() -> None:
    done = step(STOPPED)
    assert done.run_status == "cancelled" and "outside PolicyLab" in done.message


def test_failure_is_retried_until_the_budget_is_spent() -> None:
    first = step(FAILED, ray_message="Job entrypoint command failed with exit code 1", retries_used=0)
    assert (first.action, first.attempt_status, first.run_status) == ("retry", "failed", "running")
    assert "exit code 1" in first.message and "(1/2)" in first.message
    assert step(FAILED, retries_used=1).action == "retry"
    last = step(FAILED, ray_message="boom", retries_used=2)
    assert (last.action, last.run_status) == ("finish", "failed")
    assert "boom" in last.message and "gave up after 2 retries" in last.message
    assert step(FAILED, max_retries=0).action == "finish"


def test_long_ray_messages_keep_the_reason_and_the_traceback() -> None:
    message = "Job entrypoint command failed with exit code 1, last available logs:\n" + "x\n" * 9000 + "ValueError: boom"
    kept = step(FAILED, ray_message=message, max_retries=0).message
    assert kept.startswith("Job entrypoint command failed with exit code 1")
    assert "ValueError: boom" in kept and "characters cut" in kept
    assert len(kept) < 4200


def test_config_errors_are_not_retried() -> None:
    done = step(FAILED, exit_code=2, ray_message="exit code 2")
    assert (done.action, done.run_status) == ("finish", "failed")
    assert "invalid config" in done.message


def test_a_vanished_job_is_a_failure_with_a_clear_message() -> None:
    retried = step(MISSING)
    assert retried.action == "retry" and "vanished" in retried.message
    assert step(MISSING, max_retries=0).run_status == "failed"


def test_unknown_ray_status_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"ray_status.*'EXPLODED'"):
        step("EXPLODED")


@pytest.mark.parametrize(
    ("launch", "retry", "has_ckpt", "expected"),
    [
        ("", 0, False, False),
        ("", 0, True, False),  # a fresh launch ignores leftovers
        ("latest", 0, False, True),
        ("/runs/run-1/checkpoints/step_4", 0, True, "/runs/run-1/checkpoints/step_4"),
        ("", 1, True, True),  # retry: the run's own latest checkpoint
        ("", 1, False, False),  # retry before the first save: start over
        ("/runs/run-1/checkpoints/step_4", 2, False, "/runs/run-1/checkpoints/step_4"),  # fork: parent again
    ],
)
def test_resume_target_per_attempt(launch: str, retry: int, has_ckpt: bool, expected: object) -> None:
    assert resume_for_attempt(launch, retry, has_ckpt) == expected


def test_submission_ids_are_deterministic_per_attempt() -> None:
    assert submission_id(12, 3) == "policylab-run12-a3" == submission_id(12, 3)
    assert submission_id(12, 3) != submission_id(12, 4)


def test_entrypoint_is_the_trainer_cli_with_quoted_paths() -> None:
    cmd = trainer_entrypoint("python", "/runs/my run/config.yaml", "12", 3, "redis://h:6379/1")
    assert shlex.split(cmd) == ["python", "-m", "trainer", "run", "/runs/my run/config.yaml", "--run-id", "12",
                                "--attempt", "3", "--events-redis", "redis://h:6379/1"]
    with_extra = trainer_entrypoint("python", "/c.yaml", "12", 1, "redis://h/1", "--workers local")
    assert shlex.split(with_extra)[-2:] == ["--workers", "local"]
