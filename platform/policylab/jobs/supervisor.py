"""Supervise one run: open attempts, submit them to Ray, follow them, store their logs, retry, cancel.

`supervise(run_id, lock)` is the body of the Celery task jobs.tasks.supervise_run, written as a
plain function so tests can drive it directly. It is idempotent: every decision is re-derived
from the database and Ray on each tick, so a supervisor that takes over from a dead one simply
continues. The rules live in `transitions` (pure); this module only reads and writes state.

Writes touch only the fields this app owns (Run.status / message / started_at / finished_at, the ETA of
a finished run, and RunAttempt), through experiments.run_state (queryset updates that bump the run's state
version and tell its pages), so they never overwrite the progress fields ingest writes. Every end of a run
is recorded here, after the job's output is stored: the state machine is experiments.statuses.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from policylab.accounts.team_secrets import SecretError, values_for_run
from policylab.experiments.models import Run, RunAttempt
from policylab.experiments.paths import path_policy
from policylab.experiments.run_state import write_run_state
from policylab.experiments.statuses import (
    ACTIVE,
    CANCEL_FROM,
    CANCELLED,
    CANCELLING,
    QUEUED,
    STARTING,
    SUBMITTING,
    TERMINAL,
    may_advance,
)
from policylab.jobs import ray_jobs
from policylab.jobs.locks import LockLost, SupervisorLock, connection
from policylab.jobs.models import AttemptLaunch, database_token
from policylab.jobs.ray_jobs import LogTail, RayUnavailable
from policylab.jobs.transitions import (
    FAILED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_SUCCEEDED,
    Step,
    next_step,
    resume_for_attempt,
    submission_id,
    trainer_entrypoint,
)
from policylab.redaction import shown_text
from policylab.tracking.services import save_driver_lines
from trainer.config import ConfigError, load_raw, validate_config
from trainer.config.confinement import (
    READ_ROOTS_VAR,
    SYSTEM_ENVS_ALLOW_VAR,
    URL_PREFIXES_VAR,
    check_confinement,
    rebase_paths,
)
from trainer.config.loading import ENV_ALLOW_VAR
from trainer.config.outbound import ALLOW_VAR as OUTBOUND_ALLOW_VAR
from trainer.config.outbound import DENY_VAR as OUTBOUND_DENY_VAR
from trainer.config.secrets import RUN_SECRETS_VAR, referenced_names
from trainer.telemetry.redis_stream import stream_key

log = logging.getLogger(__name__)

CONFIG_NAME = "config.yaml"
# How long the verdict waits for Ray to send the rest of a finished job's output through its log tail
# before fetching the whole log instead.
FINAL_LOG_WAIT_S = 10.0


class SubmitFailed(RuntimeError):
    """Ray refused the job; the attempt counts as failed (and may be retried)."""


class InvalidRunConfig(SubmitFailed):
    """The run's config does not load or validate: retrying cannot help."""


def launch_of(attempt: RunAttempt) -> AttemptLaunch:
    launch, _ = AttemptLaunch.objects.get_or_create(attempt=attempt)
    return launch


# --- the run directory -----------------------------------------------------------------------------

def has_checkpoint(run_dir: Path) -> bool:
    """True when the run directory holds at least one checkpoint (checkpoints/step_<k>/)."""
    return any((run_dir / "checkpoints").glob("step_*"))


def run_config(run: Run, resume_from_checkpoint: bool | str) -> dict[str, Any]:
    """The experiment's native config + the run's overrides, with everything the run writes forced
    into its run directory and the resume target of this attempt."""
    config = load_raw(run.experiment.config, list(run.overrides))
    run_dir = str(run.run_dir)
    config["output_dir"] = run_dir
    config["logging_dir"] = str(run.run_dir / "logs")
    checkpoint_config = dict(config.get("checkpoint_config") or {})
    checkpoint_config["output_dir"] = str(run.run_dir / "checkpoints")
    config["checkpoint_config"] = checkpoint_config
    config["resume_from_checkpoint"] = resume_from_checkpoint
    config["resume_mode"] = None  # follow resume_from_checkpoint
    return config


def checked_run_config(run: Run, resume_from_checkpoint: bool | str) -> dict[str, Any]:
    """The attempt's config, validated exactly as the trainer will and confined to the run's files
    (relative paths made absolute). Raises ConfigError (every issue, by field path) instead of
    submitting a job that would exit 2."""
    config = run_config(run, resume_from_checkpoint)
    result = validate_config(config)
    policy = path_policy(run.run_dir)
    if result.ok:
        result.errors += check_confinement(result.config, policy)
    if not result.ok:
        raise ConfigError(result.errors)
    return rebase_paths(config, result.config, policy)


def write_run_config(run: Run, resume_from_checkpoint: bool | str) -> Path:
    """Validate the attempt's config, then write it to the run dir."""
    return write_config(run, checked_run_config(run, resume_from_checkpoint))


def write_config(run: Run, config: dict[str, Any]) -> Path:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    path = run.run_dir / CONFIG_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(path)
    return path


def own_service_ports() -> list[int]:
    """The ports a run may never call on this machine: the deployment's list, and the Ray dashboard and Redis this
    platform talks to now (settings can point elsewhere after start-up, as the tests' own clusters do)."""
    current = {urlparse(url).port for url in (settings.RAY_ADDRESS, settings.REDIS_URL)}
    return sorted(set(settings.POLICYLAB_OUTBOUND_DENY) | {port for port in current if port})


def runtime_env(secrets: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Ray runtime_env of the trainer job. On the embedded cluster the repo is on the same disk, so
    PYTHONPATH points at it instead of uploading a working_dir. `secrets`: the team secrets the config names,
    for the trainer alone (trainer.config.secrets; never in the run's config, events or logs)."""
    env_vars = {
        "TOKENIZERS_PARALLELISM": "false",
        # the trainer checks the config's paths again once `${oc.env:…}` is substituted
        READ_ROOTS_VAR: os.pathsep.join(settings.POLICYLAB_READ_ROOTS),
        URL_PREFIXES_VAR: ",".join(settings.POLICYLAB_URL_PREFIXES),
        SYSTEM_ENVS_ALLOW_VAR: ",".join(settings.POLICYLAB_SYSTEM_ENVS_ALLOW),
        ENV_ALLOW_VAR: settings.POLICYLAB_CONFIG_ENV_ALLOW,
        # the judge and code sandbox URLs a run may call (trainer.config.outbound)
        OUTBOUND_ALLOW_VAR: settings.POLICYLAB_OUTBOUND_ALLOW,
        OUTBOUND_DENY_VAR: ",".join(str(port) for port in own_service_ports()),
    }
    if settings.POLICYLAB_TRAINER_PYTHONPATH:
        env_vars["PYTHONPATH"] = str(settings.POLICYLAB_TRAINER_PYTHONPATH)
    if secrets:
        env_vars[RUN_SECRETS_VAR] = json.dumps(dict(secrets))
    return {"env_vars": env_vars}


def without_values(text: str, secrets: Mapping[str, str]) -> str:
    """`text` (Ray's answer to a submission, which may quote the runtime_env) without the secrets' values."""
    for name, value in secrets.items():
        text = text.replace(value, f"<secret {name}>")
    return text


class RaySession:
    """A JobSubmissionClient, (re)connected on demand, and the log tails of the jobs it follows."""

    def __init__(self, address: str, *, http_timeout_s: float = ray_jobs.HTTP_TIMEOUT_S,
                 retail_every_s: float = 5.0) -> None:
        self.address = address
        self.http_timeout_s = http_timeout_s
        self.retail_every_s = retail_every_s
        self._client: Any = None
        self._tails: dict[str, tuple[LogTail, float]] = {}

    def client(self) -> Any:
        if self._client is None:
            self._client = ray_jobs.connect(self.address, self.http_timeout_s)
        return self._client

    def tail(self, job_id: str) -> LogTail:
        """The job's log tail, started on first use and again (from the log's first line) when the last one
        failed, at most every `retail_every_s`."""
        tail, started = self._tails.get(job_id, (None, 0.0))
        if tail is None or (tail.error and time.monotonic() - started >= self.retail_every_s):
            tail = LogTail(self.address, job_id, connect_timeout_s=self.http_timeout_s)
            self._tails[job_id] = (tail, time.monotonic())
        return tail

    def forget(self, job_id: str) -> None:
        tail, _ = self._tails.pop(job_id, (None, 0.0))
        if tail is not None:
            tail.close()

    def reset(self) -> None:
        self._client = None

    def close(self) -> None:
        for job_id in list(self._tails):
            self.forget(job_id)


# --- state changes (each one transaction, only fields this app owns) ---------------------------------

def _set_run(run_id: int, status: str, message: str, *, only_if: Q | None = None) -> bool:
    """Write the run's status and its message (every transition replaces the message, so no stale text
    survives it) through the one writer of the live state."""
    now = timezone.now()
    changes: dict[str, Any] = {"status": status, "message": message}
    if status in TERMINAL:
        changes |= {"finished_at": now, "eta_seconds": None}
    else:
        changes["finished_at"] = None
    if status in (STARTING, STATUS_RUNNING):
        changes["started_at"] = Coalesce(F("started_at"), Value(now))
    return write_run_state(run_id, only_if=only_if, **changes)


def open_attempt(run: Run, number: int, retry: int, launch_resume_from: str) -> RunAttempt:
    """A new attempt row (not yet submitted: ray_job_id is empty until Ray accepted the job)."""
    with transaction.atomic():
        attempt = RunAttempt.objects.create(run=run, number=number, status=SUBMITTING, heartbeat_at=timezone.now())
        AttemptLaunch.objects.create(attempt=attempt, retry=retry, launch_resume_from=launch_resume_from)
        # compare-and-set: a cancel that landed since the caller read the run stands (the next tick ends it)
        _set_run(run.pk, SUBMITTING, f"attempt {number}: submitting to Ray", only_if=Q(cancel_requested=False))
    return attempt


def cancel_wins(run_id: int, step: Step) -> Step:
    """The verdict to record, read under the run's row lock: a cancel requested while Ray's answer was on
    its way turns any end but success into `cancelled` (and stops a retry). Call inside a transaction."""
    cancelled = Run.objects.select_for_update().filter(pk=run_id, cancel_requested=True).exists()
    if cancelled and step.run_status != STATUS_SUCCEEDED:
        return Step("finish", CANCELLED, CANCELLED, "cancelled by user")
    return step


def finish(run: Run, attempt: RunAttempt | None, step: Step) -> Step:
    """Record the verdict (after cancel_wins); returns the one recorded."""
    with transaction.atomic():
        step = cancel_wins(run.pk, step)
        if attempt is not None:
            RunAttempt.objects.filter(pk=attempt.pk).update(
                status=step.attempt_status, finished_at=timezone.now(), message=shown_text(step.message, run.run_dir)
            )
        _set_run(run.pk, step.run_status, step.message)
    return step


def retry(run: Run, attempt: RunAttempt, step: Step) -> RunAttempt | None:
    """Close the failed attempt and open the next one in the same transaction, so a supervisor
    crash can never leave a failed attempt without its retry (or a retry without its cause).
    None when a cancel came first: the run is then recorded as cancelled instead."""
    launch = launch_of(attempt)
    with transaction.atomic():
        if cancel_wins(run.pk, step) is not step:
            finish(run, attempt, step)
            return None
        RunAttempt.objects.filter(pk=attempt.pk).update(
            status=step.attempt_status, finished_at=timezone.now(), message=shown_text(step.message, run.run_dir)
        )
        nxt = open_attempt(run, attempt.number + 1, launch.retry + 1, launch.launch_resume_from)
        _set_run(run.pk, SUBMITTING, f"attempt {attempt.number} failed: {step.message}")
    return nxt


def set_aside_leftovers(run: Run) -> None:
    """Before a run's first job exists, anything under its names belongs to an earlier database
    (ids restart when the database is reset, Redis and the runs directory persist): move the run
    directory aside (nothing is deleted) and drop the stale event stream, whose higher entry ids
    would otherwise make Redis refuse every event of this run."""
    if run.run_dir.exists() and any(run.run_dir.iterdir()):
        aside = run.run_dir.with_name(f"{run.run_dir.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
        run.run_dir.rename(aside)
        log.warning("run %s: an earlier database's run directory was moved to %s", run.pk, aside)
    if connection().delete(stream_key(run.trainer_run_id)):
        log.warning("run %s: dropped an earlier database's event stream", run.pk)


def submit_attempt(run: Run, attempt: RunAttempt, ray: RaySession) -> None:
    """Write the attempt's config and submit it (a no-op on Ray if the job already exists)."""
    launch = launch_of(attempt)
    resume = resume_for_attempt(launch.launch_resume_from, launch.retry, has_checkpoint(run.run_dir))
    try:
        config = checked_run_config(run, resume)
        secrets = values_for_run(run.experiment.project.team, referenced_names(config))
    except (ConfigError, SecretError) as error:
        raise InvalidRunConfig(f"the run's config does not load: {error}") from error
    job_id = submission_id(database_token(), run.pk, attempt.number)
    if attempt.number == 1 and ray_jobs.job_state(ray.client(), job_id).status == ray_jobs.MISSING:
        set_aside_leftovers(run)
    config_path = write_config(run, config)
    entrypoint = trainer_entrypoint(
        settings.POLICYLAB_TRAINER_PYTHON, str(config_path), run.trainer_run_id, attempt.number, settings.REDIS_URL,
        settings.POLICYLAB_TRAINER_ARGS,
    )
    try:
        submitted = ray_jobs.submit(ray.client(), job_id, entrypoint, runtime_env(secrets),
                                    metadata={"policylab_run": str(run.pk), "policylab_attempt": str(attempt.number)})
    except RuntimeError as error:
        if isinstance(error, RayUnavailable):
            raise
        raise SubmitFailed(f"Ray refused job {job_id}: {without_values(str(error), secrets)}") from None
    log.info("run %s attempt %s: %s Ray job %s", run.pk, attempt.number,
             "submitted" if submitted else "found existing", job_id)
    with transaction.atomic():
        RunAttempt.objects.filter(pk=attempt.pk).update(ray_job_id=job_id)
        AttemptLaunch.objects.filter(pk=launch.pk).update(
            resume_from_checkpoint=str(resume).lower() if isinstance(resume, bool) else resume,
            entrypoint=entrypoint,
        )
    attempt.ray_job_id = job_id


def follow_logs(ray: RaySession, run: Run, attempt: RunAttempt, *, final: bool) -> None:
    """Store the driver output lines the job's log tail brought since the last tick. When the job is over
    (`final`), first wait for the tail to deliver the rest; fetch the whole log instead when the tail did
    not end cleanly or skipped lines (it failed, and its successor starts from the log's first line)."""
    tail = ray.tail(attempt.ray_job_id)
    if final:
        tail.ended.wait(FINAL_LOG_WAIT_S)
    first, lines = tail.take()
    stored = store_driver_lines(run, attempt, first, lines)
    if final:
        if not (stored and tail.complete):
            sync_logs(ray.client(), run, attempt, final=True)
        ray.forget(attempt.ray_job_id)
    elif not stored:
        sync_logs(ray.client(), run, attempt, final=False)


def sync_logs(client: Any, run: Run, attempt: RunAttempt, *, final: bool) -> None:
    """Store the driver output lines Ray has that we have not stored yet, from the whole log (complete
    lines only, unless the job is over)."""
    store_driver_lines(run, attempt, 0, ray_jobs.split_lines(ray_jobs.logs(client, attempt.ray_job_id), final=final))


def store_driver_lines(run: Run, attempt: RunAttempt, first: int, lines: list[str]) -> bool:
    """Store `lines` (line `first` onwards of the attempt's driver output) as far as they are new. False
    when they start after the last stored line (a gap: the caller fetches the whole log)."""
    launch = launch_of(attempt)
    if first > launch.log_lines:
        return False
    new = lines[launch.log_lines - first:]
    if not new:
        return True
    with transaction.atomic():  # the rows and the count of stored lines together; the page hears after commit
        save_driver_lines(run, attempt=attempt.number, first_line_no=launch.log_lines, lines=new)
        AttemptLaunch.objects.filter(pk=launch.pk).update(log_lines=launch.log_lines + len(new))
    return True


# --- the loop ------------------------------------------------------------------------------------------

def tick(run_id: int, ray: RaySession) -> str | None:
    """One look at the run. Returns the outcome when supervision is over, None to keep polling."""
    run = Run.objects.select_related("experiment").filter(pk=run_id).first()
    if run is None:
        return "run deleted"
    attempt = run.attempts.order_by("-number").first()

    if attempt is None or attempt.status in TERMINAL:
        if run.status in TERMINAL:
            return f"nothing to do: run is {run.status}"
        if run.cancel_requested:
            finish(run, None, Step("finish", CANCELLED, CANCELLED, "cancelled before it started"))
            return CANCELLED
        if run.status != QUEUED:
            if attempt is not None:  # repair: the run lags its last attempt
                finish(run, None, Step("finish", attempt.status, attempt.status, attempt.message))
            return f"nothing to do: run is {run.status}"
        number = attempt.number + 1 if attempt is not None else 1
        attempt = open_attempt(run, number, retry=0, launch_resume_from=run.resume_from)

    retries_used = launch_of(attempt).retry
    if not attempt.ray_job_id:
        if run.cancel_requested:
            finish(run, attempt, Step("finish", CANCELLED, CANCELLED, "cancelled before it started"))
            return CANCELLED
        try:
            submit_attempt(run, attempt, ray)
        except InvalidRunConfig as error:
            return finish(run, attempt, Step("finish", STATUS_FAILED, STATUS_FAILED, str(error))).run_status
        except SubmitFailed as error:
            step = next_step(FAILED, cancel_requested=False, retries_used=retries_used,
                             max_retries=run.max_retries, ray_message=str(error))
            return _finish_or_retry(run, attempt, step)

    client = ray.client()
    state = ray_jobs.job_state(client, attempt.ray_job_id)
    step = next_step(
        state.status,
        cancel_requested=run.cancel_requested,
        retries_used=retries_used,
        max_retries=run.max_retries,
        exit_code=state.exit_code,
        ray_message=state.message,
        job_id=attempt.ray_job_id,
    )
    final = step.action in ("finish", "retry")
    follow_logs(ray, run, attempt, final=final)
    RunAttempt.objects.filter(pk=attempt.pk).update(heartbeat_at=timezone.now())

    if final:
        return _finish_or_retry(run, attempt, step)
    if step.action == "stop_job":
        ray_jobs.stop(client, attempt.ray_job_id)
    if attempt.status != step.attempt_status:
        changes: dict[str, Any] = {"status": step.attempt_status}
        if step.attempt_status == STATUS_RUNNING:
            changes["started_at"] = timezone.now()
        RunAttempt.objects.filter(pk=attempt.pk).update(**changes)
    # A report moves the run only forward (ingest may be ahead: the trainer said `running` while Ray's
    # view lags); the verdict comes with `finish`. Compare-and-set on the status read, so a cancel or a
    # trainer event written meanwhile stands.
    if step.run_status == CANCELLING:
        advance = run.status in CANCEL_FROM
    else:
        advance = may_advance(run.status, step.run_status)
    if advance:
        _set_run(run.pk, step.run_status, f"attempt {attempt.number}: {step.message or step.run_status}",
                 only_if=Q(status=run.status))
    return None


def _finish_or_retry(run: Run, attempt: RunAttempt, step: Step) -> str | None:
    if step.action == "retry":
        nxt = retry(run, attempt, step)
        if nxt is None:
            log.info("run %s: cancelled while attempt %s was failing; not retried", run.pk, attempt.number)
            return CANCELLED
        log.warning("run %s: attempt %s failed, retrying as attempt %s: %s", run.pk, attempt.number, nxt.number,
                    step.message)
        return None
    recorded = finish(run, attempt, step)
    log.info("run %s: %s (%s)", run.pk, recorded.run_status, recorded.message)
    return recorded.run_status


def supervise(run_id: int, lock: SupervisorLock, *, ray_address: str, poll_s: float,
              stop: threading.Event | None = None) -> str:
    """Tick until the run is over. Transient trouble (Ray unreachable, a database hiccup) is logged
    and retried on the next tick; losing the lock ends supervision at once. Setting `stop` (the
    worker is shutting down) ends it after the current tick: the Ray job runs on, and the next
    worker's reconcile takes the run back."""
    stop = stop or threading.Event()
    ray = RaySession(ray_address, http_timeout_s=settings.POLICYLAB_RAY_HTTP_TIMEOUT_S,
                     retail_every_s=max(5 * poll_s, 2.0))
    try:
        return _supervise(run_id, lock, ray, poll_s, stop)
    finally:
        ray.close()


def _supervise(run_id: int, lock: SupervisorLock, ray: RaySession, poll_s: float, stop: threading.Event) -> str:
    unavailable_noted = False
    while True:
        if stop.is_set():
            return "worker shutting down"
        try:
            lock.refresh()
        except LockLost as error:
            log.warning("%s", error)
            return "lock lost"
        try:
            outcome = tick(run_id, ray)
            unavailable_noted = False
        except RayUnavailable as error:
            ray.reset()
            if not unavailable_noted:
                log.warning("run %s: %s", run_id, error)
                write_run_state(run_id, only_if=Q(status__in=ACTIVE), message=f"waiting for Ray: {error}")
                unavailable_noted = True
            outcome = None
        except DatabaseError:
            log.exception("run %s: database error, retrying", run_id)
            close_old_connections()
            outcome = None
        if outcome is not None:
            return outcome
        stop.wait(poll_s)
