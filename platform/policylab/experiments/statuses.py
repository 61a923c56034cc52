"""Run statuses: the one vocabulary of Run.status and RunAttempt.status (Django-free, so the pure
job transitions use it too; templates and JS get it from the server, see tracking.ingest.live_event).

Who writes Run.status is recorded in docs/decisions/0009-run-status-ownership.md.
"""

from __future__ import annotations

QUEUED, SUBMITTING, RUNNING = "queued", "submitting", "running"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
ALL = (QUEUED, SUBMITTING, RUNNING, SUCCEEDED, FAILED, CANCELLED)
ACTIVE = frozenset({QUEUED, SUBMITTING, RUNNING})
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})

# The trainer's telemetry states (trainer.telemetry.events.RUN_STATES) as run statuses.
FROM_TRAINER_STATE = {
    "starting": RUNNING,
    "running": RUNNING,
    "succeeded": SUCCEEDED,
    "failed": FAILED,
    "cancelled": CANCELLED,
}
