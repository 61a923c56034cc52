"""The supervisor's decisions as pure functions: Ray job state in, what to do and which statuses out.

No Django, no Celery, no Ray here (statuses is plain Python), so every rule is testable on its own. The supervisor
(`policylab.jobs.supervisor`) polls Ray, calls `next_step`, and applies the returned `Step`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

from policylab.experiments import statuses
from policylab.experiments.statuses import CANCELLED, CANCELLING, STARTING, SUBMITTING

# Ray job states (ray.job_submission.JobStatus values), plus MISSING: Ray has no job under the
# submission id although we submitted one (the cluster was restarted, or the job was deleted).
PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"
MISSING = "MISSING"
RAY_TERMINAL = frozenset({SUCCEEDED, FAILED, STOPPED, MISSING})

# Run / RunAttempt statuses, named apart from Ray's job states above.
STATUS_RUNNING, STATUS_SUCCEEDED, STATUS_FAILED = statuses.RUNNING, statuses.SUCCEEDED, statuses.FAILED

# `python -m trainer run` exit code for an invalid config or arguments: retrying cannot help.
TRAINER_CONFIG_ERROR_EXIT = 2
TRAINER_STALLED_EXIT = 3  # trainer.pipeline.runner.EXIT_STALLED: a stall with on_stall fail, not to be retried

Action = Literal["wait", "stop_job", "finish", "retry"]
SUMMARY_LIMIT = 500  # characters of a failure summary; the whole output is in the run's log


@dataclass(frozen=True)
class Step:
    """What the supervisor does after one look at the Ray job.

    wait: keep polling; stop_job: ask Ray to stop the job (cancel requested), then keep polling;
    finish: the run ends with `run_status`; retry: this attempt ended with `attempt_status`, start
    the next attempt from the latest checkpoint.
    """

    action: Action
    run_status: str
    attempt_status: str
    message: str = ""


def submission_id(database_token: str, run_id: int, attempt: int) -> str:
    """Ray submission id of an attempt: deterministic, so a supervisor that crashed after submitting
    finds the job it submitted instead of starting a second one; the database's token (jobs.models.
    database_token) keeps the ids of a reset database apart from the jobs a long-lived Ray head holds."""
    return f"policylab-{database_token}-run{run_id}-a{attempt}"


def next_step(
    ray_status: str,
    *,
    cancel_requested: bool,
    retries_used: int,
    max_retries: int,
    exit_code: int | None = None,
    ray_message: str = "",
    job_id: str = "",
) -> Step:
    """Decide from the Ray job's status.

    run_status is what the run may become (a report: the supervisor applies it only forward, see
    statuses.may_advance; a `finish` or `retry` is a verdict); attempt_status mirrors the Ray job.
    retries_used: automatic retries already made in this launch (0 on the first attempt);
    a failure is retried while retries_used < max_retries, so a launch has 1 + max_retries attempts.
    A requested cancel wins over everything but a job that Ray saw succeed.
    """
    if ray_status not in {PENDING, RUNNING, *RAY_TERMINAL}:
        raise ValueError(f"ray_status: unknown Ray job status {ray_status!r}; valid: "
                         f"{', '.join(sorted({PENDING, RUNNING, *RAY_TERMINAL}))}")
    if ray_status == SUCCEEDED:
        return Step("finish", STATUS_SUCCEEDED, STATUS_SUCCEEDED, "")
    if cancel_requested:
        if ray_status in (PENDING, RUNNING):
            attempt = SUBMITTING if ray_status == PENDING else STATUS_RUNNING
            return Step("stop_job", CANCELLING, attempt, "cancelling: stopping the Ray job")
        return Step("finish", CANCELLED, CANCELLED, "cancelled by user")
    if ray_status == PENDING:
        return Step("wait", SUBMITTING, SUBMITTING)
    if ray_status == RUNNING:
        return Step("wait", STARTING, STATUS_RUNNING, "the trainer process started")
    if ray_status == STOPPED:
        return Step("finish", CANCELLED, CANCELLED, f"Ray job {job_id} was stopped outside PolicyLab")

    if ray_status == MISSING:
        error = f"Ray job {job_id} vanished from the cluster (was the Ray head restarted?)"
    else:
        error = error_summary(ray_message) or f"Ray job {job_id} failed"
        if exit_code == TRAINER_CONFIG_ERROR_EXIT:
            return Step("finish", STATUS_FAILED, STATUS_FAILED, f"invalid config (trainer exit code 2): {error}")
        if exit_code == TRAINER_STALLED_EXIT:  # the config asked for no retry (watchdog.on_stall: fail)
            return Step("finish", STATUS_FAILED, STATUS_FAILED, error)
    if retries_used < max_retries:
        return Step("retry", SUBMITTING, STATUS_FAILED,
                    f"{error} — retrying from the latest checkpoint ({retries_used + 1}/{max_retries})")
    if max_retries:
        error = f"{error} (gave up after {max_retries} {'retry' if max_retries == 1 else 'retries'})"
    return Step("finish", STATUS_FAILED, STATUS_FAILED, error)


# `python -m trainer run` prints this line last when training fails (trainer.pipeline.runner), or when
# it refuses to start (an invalid config, paths outside the policy, a failed preflight: trainer.cli).
TRAINER_FAILURE = re.compile(r"^training (?:failed|refused): (.+)$", re.M)
# The last line of a Python traceback: an exception's type (dotted), then its message.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)\b(?::.*)?$", re.M)


def error_summary(ray_message: str, limit: int = SUMMARY_LIMIT) -> str:
    """The reason of a failed job in one line, not the ~20 000 log characters Ray's message carries:
    the trainer's own "training failed: Type: message" (or "training refused: …") line, else the last
    exception line of a traceback, else Ray's first line (e.g. "Job entrypoint command failed with
    exit code -9")."""
    text = ray_message.strip()
    found = TRAINER_FAILURE.findall(text) or EXCEPTION_LINE.findall(text)
    line = found[-1] if found else text.split("\n", 1)[0]
    line = line.strip()
    return line if len(line) <= limit else f"{line[: limit - 1]}…"


def resume_for_attempt(launch_resume_from: str, retry: int, has_own_checkpoint: bool) -> bool | str:
    """`resume_from_checkpoint` for the trainer on this attempt.

    The first attempt of a launch does what the run asks (Run.resume_from: "" fresh, "latest",
    or a checkpoint path). A retry resumes from the latest checkpoint in the run's own directory
    (true) when it has one, and otherwise starts over exactly like the launch's first attempt
    (a forked run that failed before its first save starts from the parent checkpoint again).
    """
    if retry > 0 and has_own_checkpoint:
        return True
    if launch_resume_from in ("", None):
        return False
    if launch_resume_from == "latest":
        return True
    return launch_resume_from


def trainer_entrypoint(python: str, config_path: str, run_id: str, attempt: int, events_redis: str,
                       extra_args: str = "") -> str:
    """The Ray job's shell command (contract 0001, "Trainer CLI"); `extra_args` (settings.
    POLICYLAB_TRAINER_ARGS, e.g. "--workers local" on a one-machine CPU setup) go last."""
    return " ".join(shlex.quote(part) for part in (
        python, "-m", "trainer", "run", config_path, "--run-id", run_id, "--attempt", str(attempt),
        "--events-redis", events_redis, "--exit-with-parent", *shlex.split(extra_args),
    ))
