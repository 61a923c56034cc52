"""Celery tasks of the jobs app (contract 0001): supervise_run, cancel_run, reconcile_runs."""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_shutting_down
from django.conf import settings
from django.db.models import Q

from policylab.celery import app
from policylab.experiments.models import Run, RunAttempt
from policylab.experiments.statuses import ACTIVE, QUEUED
from policylab.jobs import locks, ray_jobs
from policylab.jobs.ray_jobs import RayUnavailable
from policylab.jobs.supervisor import supervise

log = logging.getLogger(__name__)

# Set when this worker starts shutting down: supervisors return at once (their Ray jobs run on),
# so a warm shutdown is quick and the next worker takes the runs back through reconcile_runs.
shutting_down = threading.Event()


@worker_shutting_down.connect
def stop_supervising(**_: object) -> None:
    shutting_down.set()


def enqueue_supervision(run_id: int, *, force: bool = False) -> bool:
    """Queue supervise_run(run_id) unless a copy already waits in the queue (or force).

    The marker key lives as long as a message may sensibly wait; if a message is lost, the marker
    expires and reconcile_runs queues a new one."""
    client = locks.connection()
    ttl = max(int(settings.POLICYLAB_RECONCILE_INTERVAL_S * 10), 60)
    fresh = client.set(locks.enqueued_key(run_id), "1", nx=True, ex=ttl)
    if not (fresh or force):
        return False
    supervise_run.delay(run_id)
    return True


@app.task(acks_late=True)
def supervise_run(run_id: int) -> str:
    """Supervise a run until it is over; does nothing if another supervisor holds the run."""
    client = locks.connection()
    client.delete(locks.enqueued_key(run_id))
    lock = locks.SupervisorLock(client, run_id, ttl=settings.POLICYLAB_SUPERVISOR_LOCK_TTL_S)
    if not lock.acquire():
        return "already supervised"
    try:
        outcome = supervise(run_id, lock, ray_address=settings.RAY_ADDRESS,
                            poll_s=settings.POLICYLAB_SUPERVISOR_POLL_S, stop=shutting_down)
    finally:
        lock.release()
    # A resume accepted while this supervisor was recording the end found the lock taken and its own
    # task returned "already supervised": hand the queued run on now rather than at the next reconcile.
    if not shutting_down.is_set() and Run.objects.filter(pk=run_id, status=QUEUED).exists():
        enqueue_supervision(run_id, force=True)
    return outcome


@app.task(acks_late=True)
def cancel_run(run_id: int) -> str:
    """Stop the run's Ray job now (the supervisor then records `cancelled`); make sure a
    supervisor is there to record it (experiments.services.request_cancel flagged the run before this was queued)."""
    attempt = RunAttempt.objects.filter(run_id=run_id).exclude(ray_job_id="").order_by("-number").first()
    outcome = "no Ray job yet"
    if attempt is not None and attempt.status in ACTIVE:
        try:
            client = ray_jobs.connect(settings.RAY_ADDRESS, settings.POLICYLAB_RAY_HTTP_TIMEOUT_S)
            stopped = ray_jobs.stop(client, attempt.ray_job_id)
            outcome = f"stop requested for {attempt.ray_job_id}" if stopped else f"{attempt.ray_job_id} not running"
        except RayUnavailable as error:
            outcome = f"Ray unavailable ({error}); the supervisor will stop the job"
    if not locks.is_supervised(locks.connection(), run_id):
        enqueue_supervision(run_id)
    return outcome


@app.task
def reconcile_runs() -> list[int]:
    """Queue a supervisor for every unfinished run that has none (its worker died, or its message
    was lost). Runs whose Ray job vanished are then failed or retried by that supervisor."""
    client = locks.connection()
    unfinished = (
        Run.objects.filter(Q(status__in=ACTIVE) | Q(attempts__status__in=ACTIVE))
        .values_list("pk", flat=True)
        .distinct()
    )
    requeued = [
        run_id
        for run_id in unfinished
        if not locks.is_supervised(client, run_id) and enqueue_supervision(run_id)
    ]
    if requeued:
        log.warning("reconcile: runs without a supervisor, re-queued: %s", requeued)
    return requeued
