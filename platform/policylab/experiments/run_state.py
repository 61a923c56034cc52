"""The one writer of a run's live state: Run.status, message, started/finished times, the cancel flag and
the progress fields. Every write bumps Run.state_version and, once committed, sends signals.run_state_changed
(tracking.broadcast sends the run's state to its pages), so a page that keeps the highest version it has seen
never shows an older state after a newer one, whoever wrote them and in whichever order the frames arrive.

Which writes are allowed is decided by the callers with the pure rules of `statuses` (see
docs/decisions/0009-run-status-ownership.md); `only_if` makes a decision a compare-and-set, so two racing
requests cannot both act on the same state.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Q

from policylab.experiments.models import Run, run_dir_of
from policylab.experiments.signals import run_state_changed, send_on_commit
from policylab.redaction import shown_text


def write_run_state(run_id: int, *, only_if: Q | None = None, **changes: Any) -> bool:
    """Update the run's live fields (one UPDATE) when `only_if` holds; True when a row changed. The message
    is stored as every member sees it: URL credentials redacted, server paths relative (policylab.redaction)."""
    if isinstance(changes.get("message"), str):
        changes["message"] = shown_text(changes["message"], run_dir_of(run_id))
    rows = Run.objects.filter(pk=run_id)
    if only_if is not None:
        rows = rows.filter(only_if)
    if not rows.update(**changes, state_version=F("state_version") + 1):
        return False
    send_on_commit(run_state_changed, run_id)
    return True
