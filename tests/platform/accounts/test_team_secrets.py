"""Team secrets (issue 41, decision 0045): admins set, replace and delete them; every member lists the names;
no API response, page or export shows a value; the database holds only ciphertext; another team sees nothing;
a run that names one gets it at start, and only there."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client

from policylab.accounts.models import Role, TeamSecret
from policylab.accounts.services import create_api_token
from policylab.accounts.team_secrets import SecretError, values_for_run
from policylab.experiments import services
from policylab.experiments.models import Run
from tests.platform.conftest import make_member, token_client
from trainer.config.secrets import RUN_SECRETS_VAR

pytestmark = pytest.mark.django_db

VALUE = "sk-judge-SECRET-4b9d1f7a"
JUDGE = ("\nrewards:\n  judge:\n    reward_type: llm_judge\n    judge_model_type: api\n"
         "    judge_api_url: https://judge.example/v1\n    judge_model_name: qwen-judge\n"
         "    judge_api_key: ${secret:JUDGE_KEY}\n")


@pytest.fixture
def ada(team_a):
    """An admin of team A."""
    return make_member("ada", team_a, Role.ADMIN)


@pytest.fixture
def api_ada(ada, team_a):
    return token_client(ada, team_a)


def secrets_url(team) -> str:
    return f"/api/teams/{team.pk}/secrets/"


def test_an_admin_sets_a_secret_that_is_listed_but_never_read_back(api_ada, team_a, victor, alice):
    created = api_ada.post(secrets_url(team_a), {"name": "JUDGE_KEY", "value": VALUE}, format="json")
    assert created.status_code == 201, created.content
    assert VALUE not in created.content.decode()
    assert created.json()["reference"] == "${secret:JUDGE_KEY}" and created.json()["created_by"] == "ada"
    for reader in (token_client(victor, team_a), token_client(alice, team_a), api_ada):
        listed = reader.get(secrets_url(team_a))
        assert listed.status_code == 200
        assert [set(row) for row in listed.json()] == [
            {"name", "reference", "created_by", "created_at", "updated_by", "updated_at"}]
        assert VALUE not in listed.content.decode()
        detail = reader.get(f"{secrets_url(team_a)}JUDGE_KEY/")
        assert detail.status_code == 200 and VALUE not in detail.content.decode()


def test_the_database_holds_only_ciphertext(api_ada, team_a):
    api_ada.post(secrets_url(team_a), {"name": "JUDGE_KEY", "value": VALUE}, format="json")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {TeamSecret._meta.db_table}")
        rows = cursor.fetchall()
    assert len(rows) == 1 and not any(VALUE in str(column) for column in rows[0])
    assert values_for_run(team_a, ["JUDGE_KEY"]) == {"JUDGE_KEY": VALUE}  # and it decrypts


def test_only_admins_change_secrets(api_ada, team_a, alice, victor):
    api_ada.post(secrets_url(team_a), {"name": "JUDGE_KEY", "value": VALUE}, format="json")
    for who in (token_client(alice, team_a), token_client(victor, team_a)):
        assert who.post(secrets_url(team_a), {"name": "X", "value": "v"}, format="json").status_code == 403
        assert who.put(f"{secrets_url(team_a)}JUDGE_KEY/", {"value": "v"}, format="json").status_code == 403
        assert who.delete(f"{secrets_url(team_a)}JUDGE_KEY/").status_code == 403
    assert values_for_run(team_a, ["JUDGE_KEY"]) == {"JUDGE_KEY": VALUE}
    replaced = api_ada.put(f"{secrets_url(team_a)}JUDGE_KEY/", {"value": "new-value"}, format="json")
    assert replaced.status_code == 200 and values_for_run(team_a, ["JUDGE_KEY"]) == {"JUDGE_KEY": "new-value"}
    assert api_ada.delete(f"{secrets_url(team_a)}JUDGE_KEY/").status_code == 204
    assert api_ada.get(secrets_url(team_a)).json() == []
    assert api_ada.delete(f"{secrets_url(team_a)}JUDGE_KEY/").status_code == 404


def test_a_bad_name_is_refused_naming_the_rule(api_ada, team_a):
    response = api_ada.post(secrets_url(team_a), {"name": "9 lives", "value": "v"}, format="json")
    assert response.status_code == 400
    assert "letters, digits and _" in json.dumps(response.json())


def test_another_team_cannot_list_or_change(api_ada, team_a, api_bob):
    api_ada.post(secrets_url(team_a), {"name": "JUDGE_KEY", "value": VALUE}, format="json")
    assert api_bob.get(secrets_url(team_a)).status_code == 404
    assert api_bob.get(f"{secrets_url(team_a)}JUDGE_KEY/").status_code == 404
    assert api_bob.post(secrets_url(team_a), {"name": "X", "value": "v"}, format="json").status_code == 404
    assert api_bob.delete(f"{secrets_url(team_a)}JUDGE_KEY/").status_code == 404


def test_a_launch_naming_an_unknown_secret_names_it_and_the_teams_secrets(api_ada, team_a, alice, make_experiment,
                                                                         demo_yaml):
    api_ada.post(secrets_url(team_a), {"name": "OTHER_KEY", "value": "v"}, format="json")
    experiment = make_experiment(alice, team_a, source=demo_yaml + JUDGE)
    with pytest.raises(services.ValidationFailed) as refused:
        services.launch_run(experiment, alice)
    [error] = refused.value.errors
    assert error.path == "rewards.judge.judge_api_key"
    assert "no secret named JUDGE_KEY" in error.message and "its secrets: OTHER_KEY" in error.message
    with pytest.raises(SecretError, match="JUDGE_KEY"):
        values_for_run(team_a, ["JUDGE_KEY"])


def test_a_run_gets_the_secret_at_start_and_nothing_shows_it(api_ada, team_a, alice, victor, make_experiment,
                                                            demo_yaml, monkeypatch, django_capture_on_commit_callbacks):
    """The supervisor hands the value to the Ray job's environment (for the trainer alone); the experiment and run
    as every API, page and export shows them, and the run directory's config, hold only the reference."""
    from policylab.jobs import ray_jobs, supervisor

    api_ada.post(secrets_url(team_a), {"name": "JUDGE_KEY", "value": VALUE}, format="json")
    experiment = make_experiment(alice, team_a, source=demo_yaml + JUDGE)
    run = services.launch_run(experiment, alice, ["max_steps=3"])
    submitted: dict = {}
    monkeypatch.setattr(ray_jobs, "job_state", lambda client, job_id: ray_jobs.JobState(ray_jobs.MISSING))
    monkeypatch.setattr(ray_jobs, "submit", lambda client, job_id, entrypoint, runtime_env, metadata=None:
                        submitted.update(runtime_env=runtime_env, entrypoint=entrypoint) or True)
    session = supervisor.RaySession("http://127.0.0.1:9")
    monkeypatch.setattr(session, "client", lambda: object())
    attempt = supervisor.open_attempt(run, 1, retry=0, launch_resume_from="")
    supervisor.submit_attempt(run, attempt, session)

    env = submitted["runtime_env"]["env_vars"]
    assert json.loads(env[RUN_SECRETS_VAR]) == {"JUDGE_KEY": VALUE}  # what the trainer resolves from
    assert VALUE not in submitted["entrypoint"]
    on_disk = [p for p in run.run_dir.rglob("*") if p.is_file() and VALUE.encode() in p.read_bytes()]
    assert on_disk == [] and "${secret:JUDGE_KEY}" in (run.run_dir / "config.yaml").read_text()

    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(victor, team_a, 'v').secret}")
    browser = Client()
    browser.force_login(victor)
    shown = {
        "experiments list": viewer.get("/api/experiments/"),
        "experiment": viewer.get(f"/api/experiments/{experiment.pk}/"),
        "runs list": viewer.get("/api/runs/"),
        "run": viewer.get(f"/api/runs/{run.pk}/"),
        "events": viewer.get(f"/api/runs/{run.pk}/events/"),
        "logs": viewer.get(f"/api/runs/{run.pk}/logs/"),
        "experiment page": browser.get(f"/experiments/{experiment.pk}/"),
        "run page": browser.get(f"/runs/{run.pk}/"),
        "compare page": browser.get(f"/compare/?runs={run.pk}"),
        "history csv": browser.get("/history/csv/"),
        "openapi": viewer.get("/api/schema/"),
    }
    for where, response in shown.items():
        assert response.status_code == 200, (where, response.status_code)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert VALUE.encode() not in body, where
    assert "${secret:JUDGE_KEY}" in shown["experiment"].json()["config_yaml"]
    assert Run.objects.get(pk=run.pk).attempts.get().ray_job_id  # submitted


def test_a_key_written_in_the_config_is_redacted_wherever_the_config_is_shown(alice, victor, team_a, make_experiment,
                                                                             demo_yaml):
    plain = make_experiment(alice, team_a, source=demo_yaml + JUDGE.replace("${secret:JUDGE_KEY}", VALUE))
    run = Run.objects.create(experiment=plain, created_by=alice, overrides=[f"rewards.judge.judge_api_key={VALUE}"])
    viewer = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(victor, team_a, 'v').secret}")
    browser = Client()
    browser.force_login(victor)
    shown = {
        "experiments list": viewer.get("/api/experiments/").content,
        "experiment": viewer.get(f"/api/experiments/{plain.pk}/").content,
        "run": viewer.get(f"/api/runs/{run.pk}/").content,
        "runs list": viewer.get("/api/runs/").content,
        "experiment page": browser.get(f"/experiments/{plain.pk}/").content,
        "compare page": browser.get(f"/compare/?runs={run.pk}").content,
    }
    for where, body in shown.items():
        assert VALUE.encode() not in body, where
    assert viewer.get(f"/api/experiments/{plain.pk}/").json()["config"]["rewards"]["judge"]["judge_api_key"] == (
        "<redacted>")
    assert viewer.get(f"/api/runs/{run.pk}/").json()["overrides"] == ["rewards.judge.judge_api_key=<redacted>"]


def test_the_team_secrets_page_lists_names_and_lets_only_admins_change_them(ada, alice, victor, team_a):
    admin, viewer = Client(), Client()
    admin.force_login(ada)
    viewer.force_login(victor)
    assert admin.post("/accounts/secrets/", {"team": team_a.pk, "name": "JUDGE_KEY", "value": VALUE}).status_code == 302
    assert values_for_run(team_a, ["JUDGE_KEY"]) == {"JUDGE_KEY": VALUE}
    for who, client in (("admin", admin), ("viewer", viewer)):
        page = client.get("/accounts/secrets/").content.decode()
        assert "JUDGE_KEY" in page and "${secret:JUDGE_KEY}" in page and VALUE not in page, who
    assert 'name="value"' in admin.get("/accounts/secrets/").content.decode()
    assert 'name="value"' not in viewer.get("/accounts/secrets/").content.decode()  # no form for non-admins
    assert viewer.post("/accounts/secrets/", {"team": team_a.pk, "name": "X", "value": "v"}).status_code == 403
    assert viewer.post(f"/accounts/secrets/{team_a.pk}/JUDGE_KEY/delete/").status_code == 403
    assert admin.post(f"/accounts/secrets/{team_a.pk}/JUDGE_KEY/delete/").status_code == 302
    assert not TeamSecret.objects.exists()


def test_a_new_key_listed_first_keeps_old_secrets_readable(ada, team_a, settings):
    """Rotation: POLICYLAB_SECRETS_KEY=new,old decrypts what `old` encrypted; `new` alone cannot, and says why."""
    from policylab.accounts.team_secrets import set_secret

    settings.POLICYLAB_SECRETS_KEYS = ["old-key"]
    set_secret(team=team_a, name="JUDGE_KEY", value=VALUE, user=ada)
    settings.POLICYLAB_SECRETS_KEYS = ["new-key", "old-key"]
    assert values_for_run(team_a, ["JUDGE_KEY"]) == {"JUDGE_KEY": VALUE}
    settings.POLICYLAB_SECRETS_KEYS = ["new-key"]
    with pytest.raises(SecretError, match="not the key they were stored with"):
        values_for_run(team_a, ["JUDGE_KEY"])
