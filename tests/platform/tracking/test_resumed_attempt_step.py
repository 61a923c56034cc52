"""Issue 35, item 8: a resumed attempt's trainer reports step 0 while it starts (before it has loaded its
checkpoint); the run's step, which the page, the progress bar and the CLI show, never goes below the step of
the checkpoint the attempt resumes from (ingest.status_changes with resume_step_of)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from policylab.experiments.models import RunAttempt, RunStatus
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import Checkpoint
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db


def status(run, seq: int, state: str, step: int, attempt: int) -> dict:
    return event("status", run.pk, seq, step, {"state": state, "step": step, "total_steps": 400, "eta_s": None,
                                               "message": ""}, attempt)


def save(run, step: int, *, on_disk: bool = True) -> Checkpoint:
    path = run.run_dir / "checkpoints" / f"step_{step}"
    if on_disk:
        path.mkdir(parents=True)
    return Checkpoint.objects.create(run=run, step=step, path=str(path), seq=1000 + step, created_at=timezone.now())


def steps_shown(run, reports: list[tuple[str, int]], attempt: int, first_seq: int) -> list[int]:
    """The run's step after each of `reports` of `attempt`, ingested one at a time."""
    shown = []
    for seq, (state, step) in enumerate(reports, start=first_seq):
        ingest_events([status(run, seq, state, step, attempt)], run_id=run.pk, publish=False)
        run.refresh_from_db()
        shown.append(run.current_step)
    return shown


def test_a_retry_never_shows_a_step_below_the_checkpoint_it_resumes_from(make_run, runs_dir) -> None:
    run = make_run(status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    assert steps_shown(run, [("running", 100), ("running", 101)], attempt=1, first_seq=1) == [100, 101]
    save(run, 50, on_disk=False)  # pruned by hand: not what the retry resumes from
    save(run, 82)
    save(run, 90, on_disk=False)
    RunAttempt.objects.filter(run=run, number=1).update(status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.SUBMITTING)
    # attempt 2 resumes from step 82, the newest checkpoint on disk: 101 -> 82 (where training goes on), never 0
    shown = steps_shown(run, [("starting", 0), ("starting", 0), ("running", 83), ("running", 84)], attempt=2,
                        first_seq=3)
    assert shown == [82, 82, 83, 84]


def test_a_forked_run_starts_at_its_parent_checkpoint(make_run, runs_dir) -> None:
    parent = make_run(status=RunStatus.SUCCEEDED)
    checkpoint = save(parent, 300)
    child = make_run(status=RunStatus.SUBMITTING, parent_run=parent, parent_checkpoint=checkpoint,
                     resume_from=checkpoint.path)
    RunAttempt.objects.create(run=child, number=1, status=RunStatus.SUBMITTING)
    assert steps_shown(child, [("starting", 0), ("running", 301)], attempt=1, first_seq=1) == [300, 301]


def test_a_fresh_run_counts_from_zero(make_run, runs_dir) -> None:
    run = make_run(status=RunStatus.SUBMITTING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.SUBMITTING)
    assert steps_shown(run, [("starting", 0), ("running", 1)], attempt=1, first_seq=1) == [0, 1]
