"""How jobs hears of runs experiments queued or flagged for cancellation (experiments.signals, connected in
JobsConfig.ready; each is sent once the transaction that made the change has committed). The tasks module is
imported on the first call: it pulls in Celery and the supervisor, which the web process needs only then."""

from __future__ import annotations

from typing import Any


def supervise_queued_run(sender: Any, *, run_id: int, **_: Any) -> None:
    """A run was queued (launched, resumed, forked): queue its supervision; the supervisor opens the next
    attempt and submits it to Ray."""
    from policylab.jobs.tasks import enqueue_supervision

    enqueue_supervision(run_id, force=True)


def stop_cancelled_run(sender: Any, *, run_id: int, **_: Any) -> None:
    """A live run was flagged `cancelling`: stop its Ray job; the supervisor records `cancelled`."""
    from policylab.jobs.tasks import cancel_run

    cancel_run.delay(run_id)
