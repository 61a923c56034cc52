"""The supervisor's decisions as pure functions: Ray job state in, what to do and which statuses out.

No Django, no Celery, no Ray here (statuses is plain Python), so every rule is testable on its own. The supervisor
(`policylab.jobs.supervisor`) polls Ray, calls `next_step`, and applies the returned `Step`.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Literal

from policylab.experiments import statuses
from policylab.experiments.statuses import CANCELLED, SUBMITTING

# Ray job states (ray.job_submission.JobStatus values), plus MISSING: Ray has no job under the
# submission id although we submitted one (the cluster was restarted, or the job was deleted).
PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED = "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"
MISSING = "MISSING"
RAY_TERMINAL = frozenset({SUCCEEDED, FAILED, STOPPED, MISSING})

# Run / RunAttempt statuses, named apart from Ray's job states above.
STATUS_RUNNING, STATUS_SUCCEEDED, STATUS_FAILED = statuses.RUNNING, statuses.SUCCEEDED, statuses.FAILED

# `python -m trainer run` exit code for an invalid config or arguments: retrying cannot help.
TRAINER_CONFIG_ERROR_EXIT = 2

Action = Literal["wait", "stop_job", "finish", "retry"]
MESSAGE_LIMIT = 4000  # characters of Ray's failure message kept in Run/RunAttempt.message


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


def submission_id(run_id: int, attempt: int) -> str:
    """Ray submission id of an attempt: deterministic, so a supervisor that crashed after submitting
    finds the job it submitted instead of starting a second one."""
    return f"policylab-run{run_id}-a{attempt}"


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

    retries_used: automatic retries already made in this launch (0 on the first attempt);
    a failure is retried while retries_used < max_retries, so a launch has 1 + max_retries attempts.
    """
    if ray_status not in {PENDING, RUNNING, *RAY_TERMINAL}:
        raise ValueError(f"ray_status: unknown Ray job status {ray_status!r}; valid: "
                         f"{', '.join(sorted({PENDING, RUNNING, *RAY_TERMINAL}))}")
    if ray_status == SUCCEEDED:
        return Step("finish", STATUS_SUCCEEDED, STATUS_SUCCEEDED, "")
    if cancel_requested:
        if ray_status in (PENDING, RUNNING):
            active = SUBMITTING if ray_status == PENDING else STATUS_RUNNING
            return Step("stop_job", active, active, "cancelling: stopping the Ray job")
        return Step("finish", CANCELLED, CANCELLED, "cancelled by user")
    if ray_status == PENDING:
        return Step("wait", SUBMITTING, SUBMITTING)
    if ray_status == RUNNING:
        return Step("wait", STATUS_RUNNING, STATUS_RUNNING)
    if ray_status == STOPPED:
        return Step("finish", CANCELLED, CANCELLED, f"Ray job {job_id} was stopped outside PolicyLab")

    if ray_status == MISSING:
        error = f"Ray job {job_id} vanished from the cluster (was the Ray head restarted?)"
    else:
        error = clip(ray_message.strip()) or f"Ray job {job_id} failed"
        if exit_code == TRAINER_CONFIG_ERROR_EXIT:
            return Step("finish", STATUS_FAILED, STATUS_FAILED, f"invalid config (trainer exit code 2): {error}")
    if retries_used < max_retries:
        return Step("retry", STATUS_RUNNING, STATUS_FAILED,
                    f"{error} — retrying from the latest checkpoint ({retries_used + 1}/{max_retries})")
    if max_retries:
        error = f"{error} (gave up after {max_retries} {'retry' if max_retries == 1 else 'retries'})"
    return Step("finish", STATUS_FAILED, STATUS_FAILED, error)


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Ray's failure message carries the job's last ~20 000 log characters: keep its head (the
    reason) and the end of the log (the traceback), drop the middle."""
    if len(text) <= limit:
        return text
    head = text[: limit // 4].rsplit("\n", 1)[0]
    return f"{head}\n[… {len(text) - limit} characters cut …]\n{text[-(limit - len(head)):]}"


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
        "--events-redis", events_redis, *shlex.split(extra_args),
    ))
