"""Every bundled example, launched through the platform (a real Celery worker and Ray head), either
runs or fails for a reason validation or preflight knew before any worker started (issue 11):

- refused when saved: only because this build lacks a backend it names, or a path outside what a
  run may touch — each error naming its field;
- launched: succeeds (2 short steps), or fails ONCE (no retry) with the preflight's findings or the
  path policy's (checked on the cluster once `${oc.env:…}` is substituted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from policylab.experiments import services as experiment_services
from policylab.experiments.models import Project, Run
from tests.services import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "examples" / "foreign").glob("*.yaml"))
# Native (ROLL-layout) examples get a short schedule; foreign files are launched as written.
SHORT = ["max_steps=2", "eval_steps=0", "save_steps=1000", "track_with=none"]
KNOWN_BEFORE_LAUNCH = ("is not built in this version", "outside the folders runs may", "URL; use a",
                       "cannot be set from a config", "is not an allowed system_envs variable",
                       "must be a folder inside the run directory")


@pytest.fixture(scope="module", autouse=True)
def pause_celery_after_this_module(celery_services):
    yield
    celery_services.pause()


def test_the_examples_list_is_not_empty() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"demo_grpo_cpu.yaml", "demo_ppo_cpu.yaml", "verl_grpo_gsm8k.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_an_example_runs_or_fails_once_for_a_reason_known_before_launch(
    path: Path, live_celery, worker_runs_dir, alice, team_a
) -> None:
    project, _ = Project.objects.get_or_create(team=team_a, name="examples")
    overrides = SHORT if path.parent.name == "examples" else []
    try:
        experiment = experiment_services.create_experiment(project, path.stem, path.read_text(), user=alice,
                                                           overrides=overrides)
    except experiment_services.ValidationFailed as refused:
        for issue in refused.errors:
            assert issue.path and any(reason in issue.message for reason in KNOWN_BEFORE_LAUNCH), str(issue)
        return
    run = experiment_services.launch_run(experiment, alice)

    def finished() -> bool:
        run.refresh_from_db()
        return run.status in {"succeeded", "failed", "cancelled"}

    wait_for(finished, 240, f"{path.name}: run {run.pk} to finish (is {run.status}: {run.message})", interval=0.5)
    if run.status == "succeeded":
        return
    assert run.status == "failed", run.message
    # known on the cluster before any worker started: the preflight, or the path policy once
    # ${oc.env:…} is substituted there (SkyRL writes ${oc.env:HOME}/data/…) ...
    assert "preflight failed" in run.message or "paths outside what this run may touch" in run.message, run.message
    assert list(run.attempts.values_list("number", flat=True)) == [1]  # ... and never retried
    assert Run.objects.get(pk=run.pk).finished_at is not None


def test_a_run_that_cannot_run_here_fails_once_with_the_preflight_findings(
    live_celery, worker_runs_dir, alice, team_a, demo_yaml
) -> None:
    """A hub id passes the web side's checks (it is not a path) but is in no local cache: the trainer's
    preflight finds that on the cluster before any worker starts; the supervisor does not retry."""
    project, _ = Project.objects.get_or_create(team=team_a, name="examples")
    experiment = experiment_services.create_experiment(project, "not-here", demo_yaml, user=alice,
                                                       overrides=[*SHORT, "pretrain=Qwen/NoSuchModel-0.5B"])
    run = experiment_services.launch_run(experiment, alice)

    def finished() -> bool:
        run.refresh_from_db()
        return run.status in {"succeeded", "failed", "cancelled"}

    wait_for(finished, 180, f"run {run.pk} to finish (is {run.status}: {run.message})", interval=0.5)
    assert run.status == "failed"
    assert "preflight" in run.message and "Qwen/NoSuchModel-0.5B" in run.message, run.message
    assert list(run.attempts.values_list("number", flat=True)) == [1]
