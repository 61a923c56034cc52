"""Supervisor steps that need only the database (no Ray contact happens in these)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policylab.experiments import services as experiment_services
from policylab.experiments.models import Project, Run
from policylab.jobs.supervisor import RaySession, run_config, tick, write_run_config
from scripts.services import free_port

NOWHERE = f"http://127.0.0.1:{free_port()}"  # nothing listens: a test that contacted Ray would fail


@pytest.fixture
def experiment(alice, team_a, demo_yaml):
    project = Project.objects.create(team=team_a, name="p")
    return experiment_services.create_experiment(project, "e", demo_yaml, user=alice)


def test_run_config_applies_overrides_and_forces_everything_into_the_run_dir(experiment, settings, tmp_path) -> None:
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    run = Run.objects.create(experiment=experiment, overrides=["max_steps=7", "actor_train.training_args.learning_rate=0.01"])
    config = run_config(run, "/elsewhere/checkpoints/step_3")
    assert config["max_steps"] == 7
    assert config["actor_train"]["training_args"]["learning_rate"] == 0.01
    assert config["output_dir"] == str(tmp_path / "runs" / f"run-{run.pk}")
    assert config["logging_dir"].startswith(config["output_dir"])
    assert config["checkpoint_config"]["output_dir"].startswith(config["output_dir"])
    assert config["resume_from_checkpoint"] == "/elsewhere/checkpoints/step_3"
    path = write_run_config(run, True)
    assert path == run.run_dir / "config.yaml"
    written = yaml.safe_load(path.read_text())
    assert written["resume_from_checkpoint"] is True and written["max_steps"] == 7

    from trainer.config import load_config

    assert load_config(path).output_dir == str(run.run_dir)  # the trainer reads it as written


def test_a_run_cancelled_before_it_started_never_reaches_ray(experiment) -> None:
    run = Run.objects.create(experiment=experiment, cancel_requested=True)
    assert tick(run.pk, RaySession(NOWHERE)) == "cancelled"
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    assert run.attempts.count() == 0


def test_a_cancel_between_reading_the_run_and_opening_its_attempt_is_not_overwritten(experiment) -> None:
    from policylab.experiments.services import request_cancel
    from policylab.jobs.supervisor import open_attempt

    run = Run.objects.create(experiment=experiment)  # queued: what the supervisor read
    stale = Run.objects.get(pk=run.pk)
    assert request_cancel(run) and run.status == "cancelling"
    open_attempt(stale, 1, retry=0, launch_resume_from="")
    run.refresh_from_db()
    assert (run.status, run.cancel_requested) == ("cancelling", True)
    assert tick(run.pk, RaySession(NOWHERE)) == "cancelled"
    run.refresh_from_db()
    assert run.status == "cancelled" and run.attempts.get().ray_job_id == ""  # never submitted


def test_an_invalid_config_fails_the_run_without_submitting_or_retrying(experiment, settings, tmp_path: Path) -> None:
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    run = Run.objects.create(experiment=experiment, overrides=["max_steps=-3"], max_retries=2)
    assert tick(run.pk, RaySession(NOWHERE)) == "failed"
    run.refresh_from_db()
    attempt = run.attempts.get()
    assert run.status == "failed" and attempt.status == "failed"
    assert "config does not load" in run.message and "max_steps" in run.message  # names the field
    assert attempt.ray_job_id == "" and not (run.run_dir / "config.yaml").exists()


def test_a_finished_run_is_left_alone(experiment) -> None:
    run = Run.objects.create(experiment=experiment, status="succeeded")
    assert tick(run.pk, RaySession(NOWHERE)) == "nothing to do: run is succeeded"
    assert tick(10**9, RaySession(NOWHERE)) == "run deleted"


def test_a_resumed_run_opens_the_next_attempt_with_a_fresh_retry_budget(experiment, settings, tmp_path) -> None:
    from policylab.experiments.models import RunAttempt
    from policylab.jobs.models import AttemptLaunch
    from policylab.jobs.ray_jobs import RayUnavailable

    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    run = Run.objects.create(experiment=experiment, status="queued", resume_from="/runs/run-1/checkpoints/step_5")
    old = RunAttempt.objects.create(run=run, number=2, status="failed", ray_job_id="policylab-0a1b2c3d-run1-a2")
    AttemptLaunch.objects.create(attempt=old, retry=2)
    with pytest.raises(RayUnavailable):  # written and ready to submit; Ray is not there
        tick(run.pk, RaySession(NOWHERE))
    new = run.attempts.get(number=3)
    assert (new.status, new.ray_job_id) == ("submitting", "")
    assert (new.launch.retry, new.launch.launch_resume_from) == (0, "/runs/run-1/checkpoints/step_5")
    assert yaml.safe_load((run.run_dir / "config.yaml").read_text())["resume_from_checkpoint"] == (
        "/runs/run-1/checkpoints/step_5")
    run.refresh_from_db()
    assert run.status == "submitting"


def test_leftovers_of_an_earlier_database_are_set_aside_before_the_first_job(experiment, settings, tmp_path, redis_db) -> None:
    """Ids restart with a fresh database while Redis and the runs directory persist: the new run's
    events must not be refused by Redis (the stale stream has higher entry ids), and the old run's
    files must neither mix in nor be lost."""
    from policylab.jobs.supervisor import set_aside_leftovers
    from trainer.telemetry.redis_stream import stream_key

    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    run = Run.objects.create(experiment=experiment)
    (run.run_dir / "checkpoints" / "step_9").mkdir(parents=True)
    (run.run_dir / "events.jsonl").write_text('{"seq": 900}\n')
    redis_db.xadd(stream_key(run.trainer_run_id), {"event": "{}"}, id="900-1")

    set_aside_leftovers(run)

    assert not run.run_dir.exists()
    (aside,) = (tmp_path / "runs").glob(f"run-{run.pk}.stale-*")
    assert (aside / "events.jsonl").read_text() == '{"seq": 900}\n'
    assert redis_db.exists(stream_key(run.trainer_run_id)) == 0
    redis_db.xadd(stream_key(run.trainer_run_id), {"event": "{}"}, id="1-1")  # the new run's first event


def test_an_attempts_message_shows_server_paths_relative_to_the_run_as_the_runs_does(experiment, settings,
                                                                                      tmp_path) -> None:
    """The verdict's message goes on the run (written through run_state, which hides server paths) and on
    the attempt; the attempt's kept the runs directory's absolute paths (issue 34's leftover)."""
    from policylab.jobs.supervisor import finish, open_attempt
    from policylab.jobs.transitions import Step

    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    run = Run.objects.create(experiment=experiment, status="running")
    attempt = open_attempt(run, 1, retry=0, launch_resume_from="")
    message = f"FileNotFoundError: {run.run_dir}/checkpoints/step_4/model.pt"
    finish(run, attempt, Step("finish", "failed", "failed", message))
    attempt.refresh_from_db()
    run.refresh_from_db()
    assert attempt.message == "FileNotFoundError: <run_dir>/checkpoints/step_4/model.pt" == run.message
    assert str(tmp_path) not in attempt.message
