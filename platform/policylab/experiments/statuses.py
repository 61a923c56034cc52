"""Run statuses and the run's state machine: the one vocabulary of Run.status and RunAttempt.status and
the rules of who may move a run where (Django-free, so the pure job transitions use it too; templates and
JS get the vocabulary from the server, see tracking.selectors.run_state).

    queued ─▶ submitting ─▶ starting ─▶ running ─▶ succeeded | failed | cancelled
       └──────────┴─────────────┴──────────┴──▶ cancelling ─▶ cancelled

Who writes Run.status is recorded in docs/decisions/0009-run-status-ownership.md. Two kinds of writes:

- *reports* (Ray's job state seen by the supervisor, a trainer `status` event of the run's latest
  attempt) only move a run forward along the line above (`may_advance`);
- *decisions* move it anywhere the table below allows: a cancel request (`CANCEL_FROM`), the supervisor's
  verdict when an attempt ends (any active state to a terminal one; a retry back to submitting), and a
  resume (`RESUME_FROM`, back to queued).
"""

from __future__ import annotations

QUEUED, SUBMITTING, STARTING, RUNNING, CANCELLING = "queued", "submitting", "starting", "running", "cancelling"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
ALL = (QUEUED, SUBMITTING, STARTING, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)
ACTIVE = frozenset({QUEUED, SUBMITTING, STARTING, RUNNING, CANCELLING})
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
# The forward line of a live run; a report may only move a run further along it (or to a terminal state).
PROGRESS = (QUEUED, SUBMITTING, STARTING, RUNNING)

CANCEL_FROM = frozenset({QUEUED, SUBMITTING, STARTING, RUNNING})
RESUME_FROM = TERMINAL

# The trainer's telemetry states (trainer.telemetry.events.RUN_STATES) as run statuses.
FROM_TRAINER_STATE = {
    "starting": STARTING,
    "running": RUNNING,
    "succeeded": SUCCEEDED,
    "failed": FAILED,
    "cancelled": CANCELLED,
}
# What a trainer's own report may set: how far its start got. Every end is the supervisor's verdict, given
# once Ray's job is over and its output stored: a failed attempt may be retried, a trainer stopped by a
# cancel reports whatever its signal handler says, and one that said `succeeded` may still exit non-zero.
TRAINER_MAY_SET = frozenset({STARTING, RUNNING})


def may_advance(current: str, reported: str) -> bool:
    """Whether a report of `reported` may replace `current`: only forward along PROGRESS, or from a live
    state to a terminal one; never out of a terminal state and never out of `cancelling` (the cancel wins:
    only the supervisor's verdict ends it)."""
    if current in TERMINAL or current == CANCELLING:
        return False
    if reported in TERMINAL:
        return True
    return reported in PROGRESS and PROGRESS.index(reported) > PROGRESS.index(current)


def trainer_may_set(current: str, reported: str) -> bool:
    """Whether a trainer `status` event of the run's latest attempt may set the run's status."""
    return reported in TRAINER_MAY_SET and may_advance(current, reported)
