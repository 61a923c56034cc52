"""Deployment quotas (issue 34): steps per run, samples per step and live runs per team, refused when a run
is submitted (REST API and the HTML launch) with the quota's setting and value named; a run within them
still launches."""

from __future__ import annotations

import pytest
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations
from django.test import Client
from django.utils.html import escape

from policylab.experiments.models import Run
from tests.platform.conftest import make_member
from trainer.config.schema import STEP_MAX

pytestmark = pytest.mark.django_db

STEPS_QUOTA = "5000 steps is over this deployment's quota of 1000 steps per run (POLICYLAB_QUOTA_STEPS_PER_RUN = 1000)"
SAMPLES_QUOTA = ("512 samples per step (rollout_batch_size × num_return_sequences_in_group) is over this deployment's "
                 "quota of 256 (POLICYLAB_QUOTA_SAMPLES_PER_STEP = 256)")
RUNS_QUOTA = ("team Team A already has 2 live runs, this deployment's quota of concurrent runs per team "
              "(POLICYLAB_QUOTA_CONCURRENT_RUNS = 2); wait for one to finish or cancel one")


@pytest.fixture(autouse=True)
def quotas(settings):
    settings.POLICYLAB_QUOTA_CONCURRENT_RUNS = 2
    settings.POLICYLAB_QUOTA_STEPS_PER_RUN = 1000
    settings.POLICYLAB_QUOTA_SAMPLES_PER_STEP = 256  # the demo: 16 prompts x 8 samples = 128


def launch(api, experiment, *overrides: str):
    return api.post(f"/api/experiments/{experiment.pk}/runs/", {"overrides": list(overrides)}, format="json")


def test_the_schemas_step_bound_is_what_a_runs_step_columns_hold() -> None:
    """max_steps is reported as Run.total_steps: Django's range of that column type (PostgreSQL integer)."""
    assert isinstance(Run._meta.get_field("total_steps"), models.PositiveIntegerField)
    assert isinstance(Run._meta.get_field("current_step"), models.PositiveIntegerField)
    assert BaseDatabaseOperations.integer_field_ranges["PositiveIntegerField"] == (0, STEP_MAX)


def test_steps_and_samples_over_the_quotas_are_refused_over_the_api(api_alice, alice, team_a, make_experiment,
                                                                    demo_yaml) -> None:
    experiment = make_experiment(alice, team_a)
    for overrides, field, message in (
        (["max_steps=5000"], "max_steps", STEPS_QUOTA),
        (["rollout_batch_size=64"], "rollout_batch_size", SAMPLES_QUOTA),
        ([f"max_steps={2**62}"], "max_steps", f"Input should be less than or equal to {STEP_MAX}"),
        ([f"rollout_batch_size={2**40}"], "rollout_batch_size", "quota of 256 (POLICYLAB_QUOTA_SAMPLES_PER_STEP = 256)"),
    ):
        response = launch(api_alice, experiment, *overrides)
        assert response.status_code == 400, response.json()
        errors = {e["field"]: e["message"] for e in response.json()["errors"]}
        assert message in errors[field], errors
    created = api_alice.post("/api/experiments/", {"project": experiment.project.pk, "name": "long",
                                                   "config": demo_yaml.replace("max_steps: 250", "max_steps: 5000")},
                             format="json")
    assert created.status_code == 400 and created.json()["errors"] == [{"field": "max_steps", "message": STEPS_QUOTA}]
    assert not Run.objects.exists()


def test_a_quota_lowered_after_the_experiment_was_saved_applies_to_its_next_launch(api_alice, alice, team_a,
                                                                                   make_experiment, settings) -> None:
    experiment = make_experiment(alice, team_a)
    settings.POLICYLAB_QUOTA_STEPS_PER_RUN = 100  # the demo has 250
    response = launch(api_alice, experiment)
    assert response.status_code == 400 and "(POLICYLAB_QUOTA_STEPS_PER_RUN = 100)" in response.json()["errors"][0]["message"]


def test_live_runs_per_team_are_capped_over_the_api_and_the_launch_page(api_alice, alice, team_a, team_b, browser,
                                                                        make_experiment) -> None:
    experiment = make_experiment(alice, team_a)
    assert [launch(api_alice, experiment).status_code for _ in range(2)] == [201, 201]  # within the quota
    refused = launch(api_alice, experiment)
    assert refused.status_code == 429 and refused.json()["errors"] == [{"field": "", "message": RUNS_QUOTA}]
    page = browser.post(f"/experiments/{experiment.pk}/launch/", {"overrides": "max_steps=3"}, follow=True)
    # the experiment page (POST-redirect-GET), the refusal at its form
    assert page.status_code == 200 and page.redirect_chain == [(f"/experiments/{experiment.pk}/#launch-form", 302)]
    assert escape(RUNS_QUOTA) in page.content.decode()
    assert Run.objects.count() == 2

    bob = make_member("bob", team_b)  # another team's runs do not count against team A, nor A's against it
    bob_experiment = make_experiment(bob, team_b)
    bob_browser = Client()
    bob_browser.force_login(bob)
    assert bob_browser.post(f"/experiments/{bob_experiment.pk}/launch/", {"overrides": ""}).status_code == 302
    assert Run.objects.filter(experiment=bob_experiment).count() == 1

    Run.objects.filter(experiment=experiment).update(status="succeeded")  # a run that ended frees its slot
    assert launch(api_alice, experiment).status_code == 201


def test_the_launch_page_names_a_config_quota(browser, alice, team_a, make_experiment) -> None:
    experiment = make_experiment(alice, team_a)
    page = browser.post(f"/experiments/{experiment.pk}/launch/", {"overrides": "max_steps=5000"}, follow=True)
    assert escape(f"max_steps: {STEPS_QUOTA}") in page.content.decode()
    assert not Run.objects.exists()
