"""`policylab runs show RUN` prints the run's state and its health alerts (step, kind, metric, value, threshold,
samples, the inspector's address at the step), against pytest-django's live server; another team's run is not
found."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.platform.client.test_runs_list import erin, policylab  # noqa: F401  (erin: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
OK, NOT_FOUND = 0, 3


def test_runs_show_prints_the_alerts(erin, live_server, tmp_path: Path) -> None:  # noqa: F811
    from policylab.accounts.models import Team
    from policylab.experiments.models import Experiment, Project, Run
    from policylab.tracking.ingest import ingest_events
    from tests.platform.tracking.test_alerts import trainer_alerts

    user, project, token = erin
    experiment = Experiment.objects.create(project=project, name="health", config={}, created_by=user)
    run = Run.objects.create(experiment=experiment, created_by=user, total_steps=10)
    ingest_events(trainer_alerts(run.pk), publish=False)
    shown = policylab(live_server, token, "runs", "show", str(run.pk), home=tmp_path)
    assert shown.returncode == OK, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"run {run.pk} ") and lines[1] == "health alerts: 3"
    assert lines[2].startswith("  step 4  entropy_collapse  actor/entropy = 0.01 (threshold 0.05): ")
    assert "response_length/clip_ratio = 0.6667 (threshold 0.5)" in shown.stdout
    assert "[samples (group#index): 3#0, 5#2]" in shown.stdout
    assert "step 5  nan  actor/pg_loss = NaN/inf" in shown.stdout
    assert f"    inspect: {live_server.url}/runs/{run.pk}/rollouts/?step_min=4&step_max=4&step=4&latest=0" in lines
    other = Project.objects.create(team=Team.objects.create(name="Other", slug="other"), name="x")
    theirs = Run.objects.create(experiment=Experiment.objects.create(project=other, name="x", config={}))
    assert policylab(live_server, token, "runs", "show", str(theirs.pk), home=tmp_path).returncode == NOT_FOUND
