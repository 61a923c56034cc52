"""What experiments tells the apps above it. experiments imports neither jobs nor tracking (the platform's apps
depend one way: accounts → experiments → jobs / tracking → api; docs/decisions/0028-platform-apps-depend-one-way.md),
so an app that must act when a run changes connects a receiver in its AppConfig.ready:

- `run_state_changed`: a write of experiments.run_state committed (status, message, progress, the cancel flag);
  tracking sends the run's state to its open pages.
- `run_queued`: a run was queued to start (launched, resumed, forked); jobs enqueues its supervision.
- `run_cancel_requested`: a live run was flagged `cancelling`; jobs stops its Ray job.

Each is sent with `run_id` once the transaction that made the change commits (never for a rolled-back one).
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal

from policylab.experiments.models import Run

run_state_changed = Signal()
run_queued = Signal()
run_cancel_requested = Signal()


def send_on_commit(signal: Signal, run_id: int) -> None:
    """Send `signal` for `run_id` once the surrounding transaction commits (at once outside one)."""
    transaction.on_commit(lambda: signal.send(sender=Run, run_id=run_id))
