"""Launch, cancel, resume and fork (docs/decisions/0002-resume-and-fork.md)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from policylab.experiments import services
from policylab.experiments.models import Experiment, ImmutableConfigError, Run, RunStatus
from policylab.tracking.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_run(alice, team_a, make_experiment) -> Run:
    experiment = make_experiment(alice, team_a)
    run = Run.objects.create(experiment=experiment, created_by=alice, status=RunStatus.FAILED, overrides=["max_steps=30"])
    for seq, step in enumerate((10, 20), start=1):
        path = run.run_dir / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)  # resume and fork take only checkpoints that are on disk
        Checkpoint.objects.create(run=run, step=step, path=str(path), seq=seq, created_at=timezone.now())
    return run


def test_invalid_config_saves_nothing_and_carries_the_issues(alice, team_a, make_experiment, demo_yaml):
    with pytest.raises(services.ValidationFailed) as caught:
        make_experiment(alice, team_a, source=demo_yaml.replace("rollout_batch_size: 16", "rollout_batch_size: 3"))
    assert caught.value.errors and all(i.severity == "error" for i in caught.value.errors)
    assert not Experiment.objects.exists()


def test_the_config_snapshot_is_immutable(alice, team_a, make_experiment):
    experiment = make_experiment(alice, team_a)
    experiment.description = "descriptions may change"
    experiment.save()
    experiment.config = {**experiment.config, "max_steps": 1}
    with pytest.raises(ImmutableConfigError):
        experiment.save()
    assert services.canonical_hash(Experiment.objects.get(pk=experiment.pk).config) == experiment.config_hash


def test_resume_from_latest_continues_the_same_run(alice, finished_run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        resumed = services.resume_run(finished_run, alice, "latest")
    assert resumed.pk == finished_run.pk
    resumed.refresh_from_db()
    assert resumed.status == RunStatus.QUEUED and resumed.resume_from.endswith("step_20")
    assert len(callbacks) == 2 and Run.objects.count() == 1  # the pages are told; jobs takes the run


def test_resume_from_an_earlier_checkpoint_is_a_child_run(alice, finished_run):
    earlier = finished_run.checkpoints.get(step=10)
    child = services.resume_run(finished_run, alice, earlier.pk)
    assert child.pk != finished_run.pk
    assert (child.parent_run, child.parent_checkpoint, child.experiment) == (finished_run, earlier, finished_run.experiment)
    assert child.resume_from.endswith("step_10") and child.overrides == ["max_steps=30"]
    finished_run.refresh_from_db()
    assert finished_run.status == RunStatus.FAILED  # the parent's history is untouched


def test_resume_refuses_active_runs_and_unknown_checkpoints(alice, finished_run, bob, team_b, make_experiment):
    finished_run.status = RunStatus.RUNNING
    finished_run.save()
    with pytest.raises(services.RunStateError):
        services.resume_run(finished_run, alice)
    finished_run.status = RunStatus.CANCELLED
    finished_run.save()
    other = Run.objects.create(experiment=make_experiment(bob, team_b), status=RunStatus.FAILED)
    foreign = Checkpoint.objects.create(run=other, step=5, path="/b/step_5", seq=1, created_at=timezone.now())
    for bad in (foreign.pk, "soon", 10**9):
        with pytest.raises(services.ValidationFailed) as caught:
            services.resume_run(finished_run, alice, bad)
        assert caught.value.errors[0].path == "checkpoint"


def test_fork_makes_a_new_validated_experiment_and_a_linked_run(alice, finished_run):
    checkpoint = finished_run.checkpoints.get(step=10)
    child = services.fork_run(finished_run, alice, checkpoint.pk, {"actor_train.training_args.learning_rate": 0.001})
    parent_config = finished_run.experiment.config
    assert child.experiment != finished_run.experiment
    assert child.experiment.config["actor_train"]["training_args"]["learning_rate"] == 0.001
    assert child.experiment.config["max_steps"] == 30  # the parent run's overrides are kept
    assert parent_config["actor_train"]["training_args"]["learning_rate"] == 0.002
    assert (child.parent_run, child.parent_checkpoint, child.resume_from) == (finished_run, checkpoint, checkpoint.path)
    with pytest.raises(services.ValidationFailed) as caught:
        services.fork_run(finished_run, alice, "latest", {"rollout_batch_size": 3})
    assert caught.value.errors
    assert Experiment.objects.count() == 2


def test_cancel_flags_the_run_and_refuses_finished_ones(alice, finished_run, django_capture_on_commit_callbacks):
    with pytest.raises(services.RunStateError, match="already failed; there is nothing to cancel"):
        services.cancel_run(finished_run, alice)
    finished_run.status = RunStatus.RUNNING
    finished_run.save()
    with django_capture_on_commit_callbacks() as callbacks:
        outcome = services.cancel_run(finished_run, alice)
    finished_run.refresh_from_db()
    assert outcome.requested and finished_run.cancel_requested and finished_run.status == RunStatus.CANCELLING
    assert len(callbacks) == 2  # the pages are told; the Ray job is stopped


def test_overrides_as_a_mapping_become_a_dotlist():
    assert services.overrides_from_mapping({"a.b": 1, "c": {"d": "x", "e": [1, 2]}, "f": None}) == [
        "a.b=1", "c.d=x", "c.e=[1, 2]", "f=null",
    ]


def test_launch_takes_the_override_forms_the_trainer_takes(alice, team_a, make_experiment, django_capture_on_commit_callbacks):
    """`~key` deletes a key, as on the trainer's command line (the API used to refuse it)."""
    experiment = make_experiment(alice, team_a)
    with django_capture_on_commit_callbacks():
        run = services.launch_run(experiment, alice, ["~tracker_kwargs", "+tracker_kwargs.project=x", "max_steps=3"])
    assert run.overrides == ["~tracker_kwargs", "+tracker_kwargs.project=x", "max_steps=3"]
    with pytest.raises(services.ValidationFailed, match="~key"):
        services.launch_run(experiment, alice, ["max_steps"])
