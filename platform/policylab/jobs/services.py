"""What the rest of the platform calls to start and stop runs (views never touch Celery)."""

from __future__ import annotations

from django.db import transaction

from policylab.experiments.models import Run


def launch_run(run: Run) -> None:
    """Queue supervision of `run` once the surrounding transaction commits: the supervisor opens
    the next attempt and submits it to Ray."""
    from policylab.jobs.tasks import enqueue_supervision

    run_id = run.pk
    transaction.on_commit(lambda: enqueue_supervision(run_id, force=True))


def cancel_run(run: Run) -> None:
    """Request cancellation: flag the run, then (after commit) stop its Ray job and let the
    supervisor record `cancelled`. Idempotent."""
    from policylab.jobs import tasks

    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    run.cancel_requested = True
    run_id = run.pk
    transaction.on_commit(lambda: tasks.cancel_run.delay(run_id))
