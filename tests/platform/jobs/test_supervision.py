"""End to end: the platform's run services -> a real Celery worker (subprocess) -> a real Ray head ->
the real trainer CLI (tiny model, 2-4 steps on CPU), with SIGKILLs as the real failures."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from policylab.experiments import services as experiment_services
from policylab.experiments.models import Project, Run, RunAttempt
from policylab.jobs import ray_jobs
from policylab.jobs.locks import is_supervised
from policylab.jobs.models import AttemptLaunch, database_token
from policylab.jobs.transitions import submission_id
from policylab.tracking.models import LogLine
from tests.services import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TINY = [
    "save_steps=1", "eval_steps=0", "rollout_batch_size=4", "num_return_sequences_in_group=2",
    "actor_train.training_args.per_device_train_batch_size=8", "actor_train.data_args.synthetic.num_prompts=32",
    "val_batch_size=8",
]


@pytest.fixture(scope="module", autouse=True)
def pause_celery_after_this_module(celery_services):
    yield
    celery_services.pause()  # later test modules' runs are not ours to supervise


def launch(user, team, demo_yaml: str, max_steps: int) -> Run:
    project, _ = Project.objects.get_or_create(team=team, name="jobs")
    experiment = experiment_services.create_experiment(project, f"tiny-{max_steps}", demo_yaml, user=user,
                                                       overrides=[*TINY, f"max_steps={max_steps}"])
    return experiment_services.launch_run(experiment, user)


def status_of(run: Run, wanted: set[str], timeout: float) -> Run:
    def check():
        run.refresh_from_db()
        return run.status in wanted

    wait_for(check, timeout, f"run {run.pk} to become one of {sorted(wanted)} (is {run.status}: {run.message})",
             interval=0.3)
    return run


def attempt_status(run: Run, number: int, wanted: set[str], timeout: float) -> RunAttempt:
    return wait_for(lambda: RunAttempt.objects.filter(run=run, number=number, status__in=wanted).first(), timeout,
                    f"attempt {number} of run {run.pk} to become one of {sorted(wanted)}", interval=0.3)


def driver_pids(run: Run, attempt: int) -> list[int]:
    """The trainer process(es) of one attempt, found by their command line."""
    config = str(run.run_dir / "config.yaml")
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv]
            if "trainer" in words and config in words and words[words.index("--attempt") + 1] == str(attempt):
                pids.append(int(entry.name))
    return pids


def test_launch_runs_to_success_and_survives_a_killed_worker(
    celery_services, worker_runs_dir, ray_client, redis_db, alice, team_a, demo_yaml
) -> None:
    celery_services.ensure_worker()
    run = launch(alice, team_a, demo_yaml, max_steps=3)
    attempt = attempt_status(run, 1, {"running"}, timeout=90)
    assert run.run_dir.joinpath("config.yaml").is_file()
    assert ray_jobs.job_state(ray_client, attempt.ray_job_id).status == "RUNNING"

    killed_at = time.time()
    celery_services.kill_worker()  # SIGKILL: the supervisor dies mid-run
    wait_for(lambda: not is_supervised(redis_db, run.pk), 15, "the dead supervisor's lock to expire")
    assert ray_jobs.job_state(ray_client, attempt.ray_job_id).status in {"RUNNING", "SUCCEEDED"}  # training lives on
    celery_services.start_worker()  # beat / worker start-up reconcile hands the run to the new worker

    status_of(run, {"succeeded", "failed", "cancelled"}, timeout=150)
    assert run.status == "succeeded", run.message
    assert run.started_at is not None and run.finished_at is not None
    assert list(run.attempts.values_list("number", "status")) == [(1, "succeeded")]  # taken over, not resubmitted
    assert ray_jobs.job_state(ray_client, attempt.ray_job_id).status == "SUCCEEDED"
    assert [j.submission_id for j in ray_client.list_jobs()].count(attempt.ray_job_id) == 1
    assert (run.run_dir / "checkpoints" / "step_3").is_dir()
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    trained_after_kill = [e["step"] for e in events if e["type"] == "metrics" and e["time"] > killed_at]
    assert trained_after_kill, "no training step happened after the worker was killed"
    assert events[-1]["type"] == "status" and events[-1]["data"]["state"] == "succeeded"
    driver_log = "\n".join(LogLine.objects.filter(run=run, seq=-1).values_list("text", flat=True))
    assert "step 3/3" in driver_log  # the job's output was stored, by both supervisors, without gaps
    assert AttemptLaunch.objects.get(attempt__run=run).log_lines == LogLine.objects.filter(run=run, seq=-1).count()


def test_a_stopped_worker_lets_go_at_once_and_cancel_stops_the_ray_job(
    celery_services, worker_runs_dir, ray_client, redis_db, alice, team_a, demo_yaml
) -> None:
    celery_services.ensure_worker()
    run = launch(alice, team_a, demo_yaml, max_steps=200)
    attempt = attempt_status(run, 1, {"running"}, timeout=90)

    exit_code = celery_services.stop_worker()  # warm shutdown: supervisors return, training goes on
    assert exit_code != -signal.SIGKILL, "the worker did not finish its warm shutdown; it had to be killed"
    assert not is_supervised(redis_db, run.pk)  # released, not left to expire
    assert ray_jobs.job_state(ray_client, attempt.ray_job_id).status == "RUNNING"
    celery_services.start_worker()
    wait_for(lambda: is_supervised(redis_db, run.pk), 20, "the new worker to take the run back")

    experiment_services.cancel_run(run, alice)
    status_of(run, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert run.status == "cancelled", run.message
    assert ray_jobs.job_state(ray_client, attempt.ray_job_id).status == "STOPPED"
    attempt.refresh_from_db()
    assert attempt.status == "cancelled" and attempt.finished_at is not None
    assert not driver_pids(run, 1)


def test_a_crashed_trainer_is_retried_from_its_latest_checkpoint(
    celery_services, worker_runs_dir, ray_client, alice, team_a, demo_yaml
) -> None:
    celery_services.ensure_worker()
    # 30 steps of ~0.1-0.2 s: the kill lands well after the first checkpoint and before the last.
    run = launch(alice, team_a, demo_yaml, max_steps=30)
    wait_for(lambda: (run.run_dir / "checkpoints" / "step_1").is_dir(), 120, "the first checkpoint", interval=0.05)
    pids = driver_pids(run, 1)
    assert pids, "the trainer of attempt 1 is not running"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)  # a real crash (as an OOM kill would do)

    status_of(run, {"succeeded", "failed", "cancelled"}, timeout=150)
    assert run.status == "succeeded", run.message
    first, second = run.attempts.order_by("number")
    assert (first.status, second.status) == ("failed", "succeeded")
    assert ray_jobs.job_state(ray_client, first.ray_job_id).status == "FAILED"
    assert AttemptLaunch.objects.get(attempt=second).retry == 1
    assert AttemptLaunch.objects.get(attempt=second).resume_from_checkpoint == "true"
    second_log = "\n".join(LogLine.objects.filter(run=run, seq=-2).values_list("text", flat=True))
    resumed = re.search(r"resumed from \S+/checkpoints/step_(\d+) at step (\d+)", second_log)
    assert resumed, second_log[-2000:]
    assert 1 <= int(resumed[1]) == int(resumed[2]) < 30  # picked up after the crash, not from scratch
    assert (run.run_dir / "checkpoints" / "step_30").is_dir()


def test_reconcile_hands_an_orphaned_run_to_a_supervisor_that_fails_its_vanished_job(
    celery_services, worker_runs_dir, redis_db, alice, team_a, demo_yaml
) -> None:
    """A run the database believes is running, whose Ray job is gone (as after a Ray head restart)
    and which nobody supervises: no message is queued for it, only reconcile can find it."""
    from policylab.jobs.tasks import reconcile_runs

    celery_services.ensure_worker()
    project, _ = Project.objects.get_or_create(team=team_a, name="jobs")
    experiment = experiment_services.create_experiment(project, "orphan", demo_yaml, user=alice, overrides=TINY)
    run = Run.objects.create(experiment=experiment, status="running", max_retries=0)
    job_id = submission_id(database_token(), run.pk, 1)
    RunAttempt.objects.create(run=run, number=1, status="running", ray_job_id=job_id)
    reconcile_runs()  # what beat runs every few seconds (it may well beat us to it)
    status_of(run, {"failed", "succeeded", "cancelled"}, timeout=30)
    assert run.status == "failed"
    assert "vanished" in run.message and job_id in run.message
    assert list(run.attempts.values_list("status", flat=True)) == ["failed"]
