"""What the rest of the platform calls to start and stop runs (views never touch Celery)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q

from policylab.experiments.models import Run
from policylab.experiments.run_state import write_run_state
from policylab.experiments.statuses import CANCEL_FROM, CANCELLING


def launch_run(run: Run) -> None:
    """Queue supervision of `run` once the surrounding transaction commits: the supervisor opens
    the next attempt and submits it to Ray."""
    from policylab.jobs.tasks import enqueue_supervision

    run_id = run.pk
    transaction.on_commit(lambda: enqueue_supervision(run_id, force=True))


def cancel_run(run: Run) -> bool:
    """Request cancellation of a live run: flag it and move it to `cancelling` in one compare-and-set,
    then (after commit) stop its Ray job; the supervisor records `cancelled`. False (and nothing done)
    when the run is no longer cancellable: already cancelling, or finished."""
    from policylab.jobs import tasks

    requested = write_run_state(
        run.pk, only_if=Q(status__in=CANCEL_FROM), cancel_requested=True, status=CANCELLING,
        message="cancelling: stopping the Ray job", eta_seconds=None,
    )
    if requested:
        run_id = run.pk
        transaction.on_commit(lambda: tasks.cancel_run.delay(run_id))
    run.refresh_from_db()
    return requested
