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
    return next_step(status, job_id="policylab-0a1b2c3d-run7-a1", **kw)


def test_active_job_states_keep_waiting_with_matching_statuses() -> None:
    assert (step(PENDING).action, step(PENDING).run_status) == ("wait", "submitting")
    # Ray runs the job: the run is `starting` until the trainer itself reports `running` (its first step)
    assert (step(RUNNING).action, step(RUNNING).run_status, step(RUNNING).attempt_status) == ("wait", "starting", "running")


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
    assert (first.action, first.attempt_status, first.run_status) == ("retry", "failed", "submitting")
    assert "exit code 1" in first.message and "(1/2)" in first.message
    assert step(FAILED, retries_used=1).action == "retry"
    last = step(FAILED, ray_message="boom", retries_used=2)
    assert (last.action, last.run_status) == ("finish", "failed")
    assert "boom" in last.message and "gave up after 2 retries" in last.message
    assert step(FAILED, max_retries=0).action == "finish"


def test_a_failure_is_summarised_by_its_last_exception_not_dumped() -> None:
    """Ray's message carries ~20 000 characters of log: the run shows the exception, the log has the rest."""
    traceback = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                 "    raise KeyError('inner')\nKeyError: 'inner'\n\nDuring handling...\n"
                 "Traceback (most recent call last):\n  File \"y.py\", line 2\nValueError: boom at step 3\n")
    message = "Job entrypoint command failed with exit code 1, last available logs:\n" + "x\n" * 9000 + traceback
    assert step(FAILED, ray_message=message, max_retries=0).message == "ValueError: boom at step 3"
    printed = message + "training failed: RuntimeError: worker actor_train rank 0 died\n(raylet) noise\n"
    assert step(FAILED, ray_message=printed, max_retries=0).message == "RuntimeError: worker actor_train rank 0 died"
    killed = "Job entrypoint command failed with exit code -9, last available logs:\nstep 3/30 | reward 0.1\n"
    assert step(FAILED, ray_message=killed, max_retries=0).message == (
        "Job entrypoint command failed with exit code -9, last available logs:")
    assert len(step(FAILED, ray_message="E: " + "y" * 5000 + "Error", max_retries=0).message) <= 500


def test_config_errors_are_not_retried() -> None:
    done = step(FAILED, exit_code=2, ray_message="exit code 2")
    assert (done.action, done.run_status) == ("finish", "failed")
    assert "invalid config" in done.message


def test_a_stall_the_config_says_to_fail_on_is_not_retried_and_one_to_restart_on_is() -> None:
    printed = ("Job entrypoint command failed with exit code 3, last available logs:\n"
               "training failed: Stalled: phase reward has run 12 s, past its bound of 5.0 s; waiting on reward "
               "rank 0 in score (on_stall: fail: the attempt fails without a retry)\n")
    done = step(FAILED, exit_code=3, ray_message=printed)
    assert (done.action, done.run_status) == ("finish", "failed")
    assert done.message.startswith("Stalled: phase reward has run 12 s")
    assert step(FAILED, exit_code=1, ray_message=printed.replace("code 3", "code 1")).action == "retry"


def test_a_refusal_to_start_shows_the_trainers_reason() -> None:
    """`trainer run` ends stderr with "training refused: …" when preflight (or validation) stops it."""
    printed = ("Job entrypoint command failed with exit code 2, last available logs:\n"
               "invalid config /runs/run-3/config.yaml: preflight failed:\n  pretrain: 'Qwen/X' is not here\n"
               "training refused: preflight failed: pretrain: 'Qwen/X' is not here\n")
    done = step(FAILED, exit_code=2, ray_message=printed)
    assert done.message == "invalid config (trainer exit code 2): preflight failed: pretrain: 'Qwen/X' is not here"


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


def test_submission_ids_are_deterministic_per_attempt_and_apart_per_database() -> None:
    assert submission_id("0a1b2c3d", 12, 3) == "policylab-0a1b2c3d-run12-a3" == submission_id("0a1b2c3d", 12, 3)
    assert submission_id("0a1b2c3d", 12, 3) != submission_id("0a1b2c3d", 12, 4)
    assert submission_id("0a1b2c3d", 12, 3) != submission_id("9f8e7d6c", 12, 3)  # a reset database's run 12


def test_entrypoint_is_the_trainer_cli_with_quoted_paths() -> None:
    cmd = trainer_entrypoint("python", "/runs/my run/config.yaml", "12", 3, "redis://h:6379/1")
    assert shlex.split(cmd) == ["python", "-m", "trainer", "run", "/runs/my run/config.yaml", "--run-id", "12",
                                "--attempt", "3", "--events-redis", "redis://h:6379/1", "--exit-with-parent"]
    with_extra = trainer_entrypoint("python", "/c.yaml", "12", 1, "redis://h/1", "--workers local")
    assert shlex.split(with_extra)[-2:] == ["--workers", "local"]
