"""Issue 35, item 2: one decision of what a checkpoint can be used for (services.checkpoint_verdicts), which the
run page, the API's listing, the CLI, resume_run and fork_run all follow; a resumed or forked run shows the
checkpoint's step from the start (item 8)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from policylab.experiments import services
from policylab.experiments.models import Experiment, Run, RunStatus
from policylab.tracking.models import Checkpoint

pytestmark = pytest.mark.django_db


def save(run: Run, step: int, *, on_disk: bool = True, pruned: bool = False) -> Checkpoint:
    path = run.run_dir / "checkpoints" / f"step_{step}"
    if on_disk:
        path.mkdir(parents=True)
    return Checkpoint.objects.create(run=run, step=step, path=str(path), seq=step, created_at=timezone.now(),
                                     deleted_at=timezone.now() if pruned else None)


@pytest.fixture
def finished(alice, team_a, make_experiment) -> Run:
    """A run that trained all its 20 steps (max_steps from its overrides), saving at 5 (pruned), 10, 15 (gone
    from disk) and 20."""
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.SUCCEEDED,
                             overrides=["max_steps=20"], current_step=20, total_steps=20)
    save(run, 5, on_disk=False, pruned=True)
    save(run, 10)
    save(run, 15, on_disk=False)
    save(run, 20)
    return run


def verdicts_by_step(run: Run) -> dict[int, services.CheckpointVerdict]:
    rows = list(Checkpoint.objects.filter(run=run))
    verdicts = services.checkpoint_verdicts(run, rows)
    return {c.step: verdicts[c.pk] for c in rows}


def test_the_final_checkpoint_of_a_finished_run_offers_a_fork_with_more_steps_not_a_resume(finished) -> None:
    v = verdicts_by_step(finished)
    assert (v[20].on_disk, v[20].resumable, v[20].offer, v[20].fork_max_steps) == (True, False, "fork", 40)
    assert f"run {finished.pk} already finished all its 20 steps" in v[20].reason and "larger max_steps" in v[20].reason
    assert (v[10].resumable, v[10].offer, v[10].reason, v[10].fork_max_steps) == (True, "resume", "", None)
    assert (v[5].on_disk, v[5].offer) == (False, "none") and "deleted by retention" in v[5].reason
    assert (v[15].on_disk, v[15].offer) == (False, "none") and "gone from disk" in v[15].reason


def test_a_live_run_resumes_nothing_until_it_has_stopped(finished) -> None:
    Run.objects.filter(pk=finished.pk).update(status=RunStatus.RUNNING)
    finished.refresh_from_db()
    v = verdicts_by_step(finished)
    assert (v[10].resumable, v[10].offer) == (False, "fork") and v[10].reason.endswith(
        "only failed, cancelled or succeeded runs can be resumed")


def test_resume_refuses_exactly_what_the_verdict_refuses(alice, finished) -> None:
    final = Checkpoint.objects.get(run=finished, step=20)
    for target in ("latest", final.pk):
        with pytest.raises(services.RunStateError) as refused:
            services.resume_run(finished, alice, target)
        assert str(refused.value) == services.checkpoint_verdict(finished, final).reason
    earlier = Checkpoint.objects.get(run=finished, step=10)
    child = services.resume_run(finished, alice, earlier.pk)  # steps 11..20 again, in a new run
    assert child.pk != finished.pk and (child.current_step, child.total_steps) == (10, 20)


def test_a_run_resumed_in_place_shows_its_checkpoints_step_at_once(alice, team_a, make_experiment) -> None:
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.FAILED,
                             overrides=["max_steps=400"], current_step=101, total_steps=400)
    save(run, 82)
    resumed = services.resume_run(run, alice, "latest")
    assert (resumed.pk, resumed.status, resumed.current_step) == (run.pk, RunStatus.QUEUED, 82)


def test_a_fork_that_would_train_nothing_is_refused_at_max_steps(alice, finished) -> None:
    experiments = Experiment.objects.count()
    with pytest.raises(services.ValidationFailed) as refused:
        services.fork_run(finished, alice, "latest")
    assert [i.path for i in refused.value.errors] == ["max_steps"]
    assert "would train nothing" in refused.value.errors[0].message and "max_steps=40" in refused.value.errors[0].message
    assert (Experiment.objects.count(), Run.objects.count()) == (experiments, 1)  # nothing saved
    child = services.fork_run(finished, alice, "latest", ["max_steps=40"])
    assert (child.current_step, child.total_steps, child.experiment.config["max_steps"]) == (20, 40, 40)
