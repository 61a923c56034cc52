"""The run's state machine as ingest applies it: status text replaced at each transition, late reports
of an older attempt or after the end moving nothing back, the start's phases visible — and the rules
themselves (experiments.statuses), read like the lifecycle they encode."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from policylab.experiments import statuses
from policylab.experiments.models import RunAttempt, RunStatus
from policylab.jobs.supervisor import Step, finish
from policylab.tracking.ingest import ingest_events, read_jsonl
from tests.platform.tracking.conftest import event

pytestmark = pytest.mark.django_db
REPO_ROOT = Path(__file__).resolve().parents[3]


def status(run, seq: int, state: str, step: int, *, attempt: int = 1, eta: float | None = None, message: str = "") -> dict:
    return event("status", run.pk, seq, step, {"state": state, "step": step, "total_steps": 400, "eta_s": eta,
                                               "message": message}, attempt)


def header(run) -> tuple:
    run.refresh_from_db()
    return run.status, run.current_step, run.eta_seconds, run.message


def test_reports_only_move_a_run_forward_and_never_out_of_a_cancel_or_an_end() -> None:
    line = ["queued", "submitting", "starting", "running"]
    for current, reported in itertools.product(statuses.ALL, statuses.ALL):
        if current in ("cancelling", "succeeded", "failed", "cancelled"):
            expected = False
        elif reported in ("succeeded", "failed", "cancelled"):
            expected = True
        else:
            expected = reported in line and line.index(reported) > line.index(current)
        assert statuses.may_advance(current, reported) is expected, (current, reported)
    # the trainer's own `failed` / `cancelled` are reports the supervisor turns into verdicts (or retries)
    # the trainer's own reports only say how far its start got; every end is the supervisor's verdict
    assert [s for s in statuses.ALL if statuses.trainer_may_set("queued", s)] == ["starting", "running"]


def test_the_status_text_is_replaced_at_every_transition(make_run) -> None:
    run = make_run(status=RunStatus.SUBMITTING, message="attempt 2: submitting to Ray")
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.SUBMITTING)
    ingest_events([status(run, 1, "starting", 0, attempt=2, message="loading model: actor_train")],
                  run_id=run.pk, publish=False)
    assert header(run) == (RunStatus.STARTING, 0, None, "loading model: actor_train")
    ingest_events([status(run, 2, "running", 1, attempt=2, eta=30.0)], run_id=run.pk, publish=False)
    assert header(run) == (RunStatus.RUNNING, 1, 30.0, "")
    ingest_events([status(run, 3, "succeeded", 400, attempt=2, eta=0.0)], run_id=run.pk, publish=False)
    assert header(run) == (RunStatus.RUNNING, 400, 0.0, "")  # the process is still exiting
    finish(run, None, Step("finish", RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, ""))  # Ray: the job succeeded
    assert header(run) == (RunStatus.SUCCEEDED, 400, None, "")
    assert run.finished_at is not None


def test_late_reports_of_an_older_attempt_move_nothing(make_run) -> None:
    run = make_run(status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.RUNNING)
    ingest_events([status(run, 10, "running", 358, attempt=2, eta=40.0)], run_id=run.pk, publish=False)
    ingest_events([status(run, 11, "running", 269, attempt=1, eta=130.0),
                   status(run, 12, "failed", 269, attempt=1, message="SystemExit: 15")], run_id=run.pk, publish=False)
    assert header(run) == (RunStatus.RUNNING, 358, 40.0, "")


def test_an_older_attempt_moves_nothing_once_a_newer_one_is_open(make_run) -> None:
    """The supervisor has opened attempt 2, which has not reported yet: attempt 1's late reports are history."""
    run = make_run(status=RunStatus.RUNNING)
    first = RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    ingest_events([status(run, 10, "running", 120, attempt=1, eta=60.0)], run_id=run.pk, publish=False)
    first.status = RunStatus.FAILED
    first.save()
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.STARTING)
    ingest_events([status(run, 11, "running", 130, attempt=1, eta=50.0)], run_id=run.pk, publish=False)
    assert header(run)[1:3] == (120, 60.0)


def test_a_finished_run_keeps_its_last_step_and_shows_no_eta(make_run) -> None:
    """Ingest lags: the supervisor recorded the end before the trainer's last reports were read, and a
    report that lagged behind the end arrives with them, in one batch."""
    run = make_run(status=RunStatus.RUNNING)
    finish(run, None, Step("finish", RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, ""))
    ingest_events([status(run, 5, "running", 399, eta=1.0), status(run, 6, "succeeded", 400, eta=0.0),
                   status(run, 7, "running", 312, eta=24.0)], run_id=run.pk, publish=False)
    assert header(run) == (RunStatus.SUCCEEDED, 400, None, "")


def test_a_replayed_status_changes_nothing(make_run) -> None:
    run = make_run(status=RunStatus.RUNNING)
    events = [status(run, seq, "running", seq, eta=float(100 - seq)) for seq in range(1, 6)]
    ingest_events(events, run_id=run.pk, publish=False)
    version = run.__class__.objects.get(pk=run.pk).state_version
    ingest_events(events[:3], run_id=run.pk, publish=False)  # the Redis sink (or import_events) replaying
    assert header(run) == (RunStatus.RUNNING, 5, 95.0, "")
    assert run.state_version == version


def test_the_trainer_reports_each_phase_of_its_start(make_run, tmp_path: Path) -> None:
    """Before its first step a run is `starting`, and says with what: the user can tell data, model
    loading and the first rollout apart (the real trainer, one step, every role in its process)."""
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "trainer", "run", str(REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"), "--workers", "local",
         "--run-id", "phases", f"output_dir={out}", f"logging_dir={out}/logs", "max_steps=1", "save_steps=100",
         "eval_steps=100", "track_with=none"],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=300,
    )
    reports = [(e["data"]["state"], e["data"]["message"]) for e in read_jsonl(out / "events.jsonl") if e["type"] == "status"]
    starting = [message for state, message in reports if state == "starting"]
    assert starting[0] == "loading tokenizer and data" and starting[-1] == "first rollout", reports
    assert "loading model: actor_train" in starting and "loading model: actor_infer" in starting, reports
    assert [state for state, _ in reports][-2:] == ["running", "succeeded"], reports

    run = make_run(status=RunStatus.SUBMITTING)
    seen = []
    for e in read_jsonl(out / "events.jsonl"):
        ingest_events([e], run_id=run.pk, publish=False)
        seen.append(header(run)[::3])
    assert (RunStatus.STARTING, "loading model: actor_train") in seen and (RunStatus.STARTING, "first rollout") in seen
    assert seen[-1] == (RunStatus.RUNNING, "")  # `succeeded` is recorded by the supervisor, from Ray
