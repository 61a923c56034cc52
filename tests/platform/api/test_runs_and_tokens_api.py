"""Run actions and API tokens through the REST API."""

from __future__ import annotations

import hashlib

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from policylab.accounts.models import ApiToken
from policylab.accounts.services import create_api_token
from policylab.experiments.models import Run, RunStatus
from policylab.tracking.models import Checkpoint
from tests.platform.conftest import make_member, token_client

pytestmark = pytest.mark.django_db


def test_resume_fork_and_cancel_through_the_api(api_alice, alice, team_a, make_experiment):
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.RUNNING)
    assert api_alice.post(f"/api/runs/{run.pk}/resume/", {}, format="json").status_code == 409
    assert api_alice.post(f"/api/runs/{run.pk}/cancel/").status_code == 202
    run.refresh_from_db()
    assert run.cancel_requested
    run.status = RunStatus.CANCELLED
    run.save()
    no_checkpoint = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": "latest"}, format="json")
    assert no_checkpoint.status_code == 400 and no_checkpoint.json()["errors"][0]["field"] == "checkpoint"
    (run.run_dir / "checkpoints" / "step_4").mkdir(parents=True)
    checkpoint = Checkpoint.objects.create(run=run, step=4, path=str(run.run_dir / "checkpoints" / "step_4"), seq=1,
                                           created_at=timezone.now())
    resumed = api_alice.post(f"/api/runs/{run.pk}/resume/", {"checkpoint": checkpoint.pk}, format="json")
    assert resumed.status_code == 201 and resumed.json()["id"] == run.pk and resumed.json()["status"] == "queued"
    run.status = RunStatus.FAILED
    run.save()
    fork = api_alice.post(f"/api/runs/{run.pk}/fork/",
                          {"checkpoint": "latest", "overrides": {"max_steps": 7}}, format="json")
    assert fork.status_code == 201, fork.json()
    child = api_alice.get(f"/api/runs/{fork.json()['id']}/").json()
    assert child["parent_run"] == run.pk and child["parent_checkpoint"] == checkpoint.pk
    bad = api_alice.post(f"/api/runs/{run.pk}/fork/", {"overrides": {"max_steps": "many"}}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "max_steps"


def test_tokens_are_shown_once_stored_hashed_listed_and_revoked(alice, team_a):
    session = APIClient()
    session.force_login(alice)
    created = session.post("/api/tokens/", {"name": "ci"}, format="json")
    assert created.status_code == 201
    secret = created.json()["token"]
    stored = ApiToken.objects.get(pk=created.json()["id"])
    assert stored.key_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in stored.key_hash
    assert secret.startswith(stored.prefix) and len(secret) > 40
    assert all("token" not in t for t in session.get("/api/tokens/").json()["results"])

    bearer = APIClient()
    bearer.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert bearer.get("/api/experiments/").status_code == 200
    stored.refresh_from_db()
    assert stored.last_used_at is not None
    assert session.delete(f"/api/tokens/{stored.pk}/").status_code == 204
    assert bearer.get("/api/experiments/").status_code == 401
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer plk_not-a-real-token")
    assert wrong.get("/api/experiments/").status_code == 401
    assert APIClient().get("/api/experiments/").status_code in (401, 403)



@pytest.mark.parametrize("by", ["session", "token"])
def test_a_team_mates_token_is_neither_shown_nor_revoked(alice, team_a, by):
    """Tokens belong to their owner: another member of the same team gets 404 for a team-mate's token,
    cannot revoke it, does not see it listed, and the token goes on working."""
    carol = make_member("carol", team_a)
    theirs = create_api_token(carol, team_a, "carol-ci")
    if by == "token":
        session = token_client(alice, team_a)
    else:
        session = APIClient()
        session.force_login(alice)
    assert session.get(f"/api/tokens/{theirs.token.pk}/").status_code == 404
    assert session.delete(f"/api/tokens/{theirs.token.pk}/").status_code == 404
    assert theirs.token.pk not in [t["id"] for t in session.get("/api/tokens/").json()["results"]]
    theirs.token.refresh_from_db()
    assert theirs.token.revoked_at is None
    owner = APIClient()
    owner.credentials(HTTP_AUTHORIZATION=f"Bearer {theirs.secret}")
    assert owner.get("/api/experiments/").status_code == 200
    assert owner.get(f"/api/tokens/{theirs.token.pk}/").json()["name"] == "carol-ci"

def test_list_filters(api_alice, alice, team_a, make_experiment):
    first, second = make_experiment(alice, team_a, "one"), make_experiment(alice, team_a, "two")
    Run.objects.create(experiment=first, status=RunStatus.FAILED)
    Run.objects.create(experiment=second, status=RunStatus.RUNNING)
    assert [r["experiment"] for r in api_alice.get("/api/runs/?status=failed").json()["results"]] == [first.pk]
    assert api_alice.get(f"/api/runs/?experiment={second.pk}").json()["count"] == 1
    assert api_alice.get("/api/runs/?status=bogus").status_code == 400
    assert api_alice.get(f"/api/experiments/?project={first.project_id}").json()["count"] == 2
    assert api_alice.get("/api/experiments/?tag=nothing").json()["count"] == 0
    assert api_alice.get("/api/experiments/?project=abc").status_code == 400
