"""Cancel and resume racing each other through the REST API, on a real run: the platform's services ->
a real Celery worker -> a real Ray head -> the real trainer, with the trainer's telemetry ingested by
this test (so it decides when a late report arrives). The final state is asserted, and that nothing
was retried or relaunched that should not have been."""

from __future__ import annotations

import time
import uuid
from functools import partial
from pathlib import Path

import pytest
from django.db import OperationalError, close_old_connections

from policylab.experiments import services as experiment_services
from policylab.experiments.models import Project, Run
from policylab.jobs import ray_jobs
from policylab.jobs.models import database_token
from policylab.jobs.transitions import submission_id
from policylab.tracking.ingest import ingest_events
from policylab.tracking.models import Checkpoint
from policylab.tracking.streams import StreamIngestor
from tests.services import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LONG = ["max_steps=100000", "save_steps=2", "max_ckpts_to_keep=2", "eval_steps=0", "rollout_batch_size=4",
        "num_return_sequences_in_group=2", "actor_train.training_args.per_device_train_batch_size=8",
        "actor_train.data_args.synthetic.num_prompts=32", "val_batch_size=8"]


@pytest.fixture(scope="module", autouse=True)
def pause_celery_after_this_module(celery_services):
    yield
    celery_services.pause()  # later test modules' runs are not ours to supervise


def test_cancel_and_resume_races_end_cancelled_and_retry_nothing(
    celery_services, worker_runs_dir, ray_client, redis_db, jobs_redis_url, alice, team_a, demo_yaml, api_alice
) -> None:
    from trainer.telemetry import EventEmitter
    from trainer.telemetry.redis_stream import RedisStreamSink

    celery_services.ensure_worker()
    ingestor = StreamIngestor(redis_db, consumer=f"races-{uuid.uuid4().hex[:6]}", block_ms=50, rescan_s=0,
                              claim_idle_ms=0, ingest=partial(ingest_events, publish=False))

    def pump() -> None:
        """What `manage.py ingest_events` does, at the test's pace: a batch that met the worker's write
        on SQLite ("database is locked") stays pending and is claimed again on the next call."""
        try:
            ingestor.claim_stale()
            for _ in range(100):  # bounded: a trainer that never stops must fail the test, not hang it
                if not ingestor.read_once():
                    break
        except OperationalError:
            close_old_connections()
    project, _ = Project.objects.get_or_create(team=team_a, name="races")
    experiment = experiment_services.create_experiment(project, "long", demo_yaml, user=alice, overrides=LONG)
    run = experiment_services.launch_run(experiment, alice)

    def reach(wanted: set[str], timeout: float) -> None:
        def check() -> bool:
            pump()
            run.refresh_from_db()
            return run.status in wanted
        wait_for(check, timeout, f"run {run.pk} to become one of {sorted(wanted)}", interval=0.3)

    def post(action: str, body: dict | None = None):
        return api_alice.post(f"/api/runs/{run.pk}/{action}/", body or {}, format="json")

    reach({"running"}, timeout=120)
    wait_for(lambda: (reach({"running"}, 10), Checkpoint.objects.filter(run=run).exists())[1], 60, "a checkpoint")

    # Two cancels: the second is answered with the state, not a 409; a resume meanwhile is refused.
    first, second = post("cancel"), post("cancel")
    assert (first.status_code, first.json()["status"]) == (202, "cancelling")
    assert (second.status_code, second.json()["status"]) == (200, "cancelling")
    refused = post("resume")
    assert refused.status_code == 409 and "cancelling" in refused.json()["errors"][0]["message"]

    # The stopped trainer's last word (Ray's SIGTERM handler makes it "failed: SystemExit: 15") comes late.
    job = run.attempts.get(number=1).ray_job_id
    wait_for(lambda: ray_jobs.job_state(ray_client, job).status == "STOPPED", 60, "Ray to stop the job")
    late = EventEmitter(run.trainer_run_id, 1, [RedisStreamSink(jobs_redis_url, run.trainer_run_id)])
    late.status("failed", 3, total_steps=100000, message="SystemExit: 15")
    late.close()
    reach({"cancelled", "failed", "succeeded"}, timeout=60)
    assert (run.status, run.message) == ("cancelled", "cancelled by user")
    assert list(run.attempts.values_list("number", "status")) == [(1, "cancelled")]  # no retry of a cancel
    again = post("cancel")
    assert (again.status_code, again.json()["status"]) == (200, "cancelled")

    # Resume, then cancel at once: it ends cancelled, and nothing runs on Ray.
    resumed = post("resume", {"checkpoint": "latest"})
    assert resumed.status_code == 201, resumed.json()
    assert (resumed.json()["id"], resumed.json()["status"]) == (run.pk, "queued")
    cancelled = post("cancel")
    assert (cancelled.status_code, cancelled.json()["status"]) == (202, "cancelling")
    reach({"cancelled", "failed", "succeeded"}, timeout=60)
    assert run.status == "cancelled"
    attempts = list(run.attempts.order_by("number").values_list("number", "status", "ray_job_id"))
    assert [a[:2] for a in attempts] in ([(1, "cancelled")], [(1, "cancelled"), (2, "cancelled")]), attempts
    for _, _, job_id in attempts:
        if job_id:
            assert ray_jobs.job_state(ray_client, job_id).status in {"STOPPED", "FAILED"}, job_id
    # ... and no trainer of the run trains on: a job stopped while starting must not leave its entrypoint
    # orphaned (trainer/cli.py exit_when_orphaned).
    wait_for(lambda: not trainer_processes(run), 30, f"the trainer processes of run {run.pk} to end")

    # Beat's reconcile (every 2 s here) keeps looking: nothing is picked up again.
    time.sleep(5)
    reach({"cancelled"}, timeout=1)
    prefix = submission_id(database_token(), run.pk, 1).removesuffix("a1")
    jobs_of_run = [j.submission_id for j in ray_client.list_jobs() if (j.submission_id or "").startswith(prefix)]
    assert sorted(jobs_of_run) == sorted(a[2] for a in attempts if a[2])
    assert Run.objects.get(pk=run.pk).attempts.count() == len(attempts)


def trainer_processes(run: Run) -> list[int]:
    """Pids of `python -m trainer run <this run's config>` processes on this machine."""
    config = str(run.run_dir / "config.yaml")
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"trainer" in argv and config.encode() in argv:
                found.append(int(proc.name))
    return found
