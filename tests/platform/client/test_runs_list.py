"""`policylab runs list` shows experiment names, takes `--experiment` as an id or a name, and finds runs by
name with `--search` (against pytest-django's live server; runs made through the ORM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db(transaction=True)
POLICYLAB = Path(sys.executable).with_name("policylab")
OK, USAGE = 0, 2


@pytest.fixture
def erin(transactional_db):
    """erin, a member of team "cli", her project, and an API token of hers."""
    from django.contrib.auth import get_user_model

    from policylab.accounts.models import Membership, Role, Team
    from policylab.accounts.services import create_api_token
    from policylab.experiments.models import Project

    user = get_user_model().objects.create_user("erin", password="erin-pass-123456")
    team = Team.objects.create(name="CLI team", slug="cli")
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    project = Project.objects.create(team=team, name="lab")
    return user, project, create_api_token(user, team, "cli").secret


def policylab(live_server, token: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    if not POLICYLAB.exists():
        pytest.fail(f"no {POLICYLAB}: `bash scripts/setup.sh` installs the client (pip install -e client/)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYLAB_")}
    env |= {"HOME": str(home), "POLICYLAB_CONFIG": str(home / "policylab.json")}
    return subprocess.run([str(POLICYLAB), "--url", live_server.url, "--token", token, *args], capture_output=True,
                          text=True, env=env, timeout=120)


def listed_ids(result: subprocess.CompletedProcess) -> list[int]:
    assert result.returncode == OK, result.stderr
    return [int(line.split()[0]) for line in result.stdout.splitlines()[1:]]


def test_runs_list_shows_names_and_filters_by_experiment_name_and_search(erin, live_server, tmp_path: Path) -> None:
    from policylab.experiments.models import Experiment, Run

    user, project, token = erin

    def experiment(name: str) -> Experiment:
        return Experiment.objects.create(project=project, name=name, config={"max_steps": 5}, config_yaml="max_steps: 5\n",
                                         config_hash=f"{name}-{Experiment.objects.count()}", created_by=user)

    sweep_a, sweep_b, base = experiment("lr sweep"), experiment("lr sweep"), experiment("baseline")
    runs = {e.pk: Run.objects.create(experiment=e, created_by=user, status="succeeded") for e in (sweep_a, sweep_b, base)}

    everything = policylab(live_server, token, "runs", "list", home=tmp_path)
    assert sorted(listed_ids(everything)) == sorted(r.pk for r in runs.values())
    base_line = next(line for line in everything.stdout.splitlines() if line.split()[0] == str(runs[base.pk].pk))
    assert f"baseline (#{base.pk})" in base_line  # the name, not only the id

    by_name = policylab(live_server, token, "runs", "list", "--experiment", "lr sweep", home=tmp_path)
    assert sorted(listed_ids(by_name)) == sorted([runs[sweep_a.pk].pk, runs[sweep_b.pk].pk])  # before: usage error
    by_id = policylab(live_server, token, "runs", "list", "--experiment", str(base.pk), home=tmp_path)
    assert listed_ids(by_id) == [runs[base.pk].pk]
    searched = policylab(live_server, token, "runs", "list", "--search", "SWEEP", home=tmp_path)
    assert sorted(listed_ids(searched)) == sorted([runs[sweep_a.pk].pk, runs[sweep_b.pk].pk])
    none = policylab(live_server, token, "runs", "list", "--search", "nothing like it", home=tmp_path)
    assert listed_ids(none) == []
