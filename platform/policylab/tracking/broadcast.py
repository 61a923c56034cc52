"""What tracking sends to a run's open pages outside trainer events: the run's committed live state (each write
of experiments.run_state, received through experiments.signals.run_state_changed) and the log lines the
supervisor stores from the Ray driver's output. Best effort: the rows are committed before anything is sent,
and a channel layer outage is logged, never raised."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from policylab.experiments.models import Run
from policylab.tracking.models import LogLine
from policylab.tracking.selectors import log_dict, run_state

log = logging.getLogger(__name__)

LOG_FRAME_LINES = 500


def group_name(run_id: int) -> str:
    """The Channels group of a run's browsers."""
    return f"run-{run_id}"


def publish_run_state(run_id: int) -> None:
    """Send the run's committed live state (with its version) to the run's pages (best effort)."""
    layer = get_channel_layer()
    run = Run.objects.filter(pk=run_id).first()
    if layer is None or run is None:
        return
    try:
        async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.state", "run": run_state(run)})
    except Exception:  # a channel layer outage must not fail the write that was committed
        log.exception("run %s: publishing its state failed", run_id)


def run_state_changed(sender: Any, *, run_id: int, **_: Any) -> None:
    """Receiver of experiments.signals.run_state_changed (connected in TrackingConfig.ready)."""
    publish_run_state(run_id)


def publish_log_lines(run_id: int, lines: list[LogLine]) -> None:
    """Send log lines stored outside a trainer event (the Ray driver's output, stored by the supervisor) to the
    run's pages, colour codes kept, at most LOG_FRAME_LINES per frame (best effort: the rows are committed)."""
    layer = get_channel_layer()
    if layer is None or not lines:
        return
    rows = [log_dict(line, colours=True) for line in lines]
    try:
        for start in range(0, len(rows), LOG_FRAME_LINES):
            async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.logs", "lines": rows[start:start + LOG_FRAME_LINES]})
    except Exception:  # a channel layer outage must not fail the supervisor's sync
        log.exception("run %s: publishing %d log lines failed", run_id, len(rows))
