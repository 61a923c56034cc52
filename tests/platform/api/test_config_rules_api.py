"""Every rule of the config engineer's validation table (tests/trainer/config) through the API:
errors are a 400 naming the field (nothing saved), warnings come back by field from validate."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from policylab.experiments.models import Experiment, Project

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "trainer" / "config"))
from config_testing import changed
from test_config_validation import RULES

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("changes", "path", "severity"), [r[1:4] for r in RULES], ids=[r[0] for r in RULES])
def test_rule_through_the_api(api_alice, team_a, changes, path, severity):
    config = changed(changes)
    if severity == "error":
        project = Project.objects.create(team=team_a, name="p")
        response = api_alice.post("/api/experiments/", {"project": project.pk, "name": "x", "config": config}, format="json")
        assert response.status_code == 400, response.content
        assert path in [e["field"] for e in response.json()["errors"]]
        assert not Experiment.objects.exists()
    else:
        response = api_alice.post("/api/configs/validate/", {"config": config}, format="json")
        body = response.json()
        # 200, or 400 only because a backend the rule concerns (Megatron, …) is not built yet
        assert response.status_code == 200 or all("is not built" in e["message"] for e in body["errors"]), body
        assert path in [w["field"] for w in body["warnings"]]
