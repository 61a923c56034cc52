"""Query parameters: `GET /api/runs/?search=` finds runs by name and `?experiment=` takes a name; a parameter
an endpoint does not know is a 400 naming it and listing the valid ones (it was silently ignored), while
every parameter the OpenAPI document lists, on every endpoint, is still accepted."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from policylab.experiments.models import Project, Run, RunStatus

pytestmark = pytest.mark.django_db


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content[:500]
    return [r["id"] for r in response.json()["results"]]


def test_search_finds_runs_by_the_experiments_name(api_alice, alice, team_a, make_experiment) -> None:
    sweep = Run.objects.create(experiment=make_experiment(alice, team_a, "lr sweep 3e-4"), created_by=alice)
    base = Run.objects.create(experiment=make_experiment(alice, team_a, "baseline"), created_by=alice)
    assert sorted(ids(api_alice.get("/api/runs/"))) == sorted([sweep.pk, base.pk])
    assert ids(api_alice.get("/api/runs/", {"search": "sweep"})) == [sweep.pk]  # before: both (ignored)
    assert ids(api_alice.get("/api/runs/", {"search": "BASE"})) == [base.pk]  # ignoring case
    assert ids(api_alice.get("/api/runs/", {"search": "nothing like it"})) == []
    assert ids(api_alice.get("/api/runs/", {"search": "sweep", "status": "queued"})) == [sweep.pk]
    assert api_alice.get("/api/runs/", {"search": "x" * 201}).status_code == 400


def test_search_never_reaches_another_teams_runs(api_alice, bob, team_b, make_experiment) -> None:
    Run.objects.create(experiment=make_experiment(bob, team_b, "lr sweep"), created_by=bob)
    assert ids(api_alice.get("/api/runs/", {"search": "sweep"})) == []


def test_experiment_takes_an_id_or_a_name(api_alice, alice, team_a, make_experiment) -> None:
    first = make_experiment(alice, team_a, "demo")
    other_project = Project.objects.create(team=team_a, name="other")
    from policylab.experiments import services

    second = services.create_experiment(other_project, "demo", first.config_yaml, user=alice)  # the same name
    unrelated = make_experiment(alice, team_a, "demo 2")
    runs = {e.pk: Run.objects.create(experiment=e, created_by=alice, status=RunStatus.SUCCEEDED)
            for e in (first, second, unrelated)}
    assert ids(api_alice.get("/api/runs/", {"experiment": first.pk})) == [runs[first.pk].pk]
    assert sorted(ids(api_alice.get("/api/runs/", {"experiment": "demo"}))) == sorted(
        [runs[first.pk].pk, runs[second.pk].pk])  # before: 400 "expected an id"
    assert ids(api_alice.get("/api/runs/", {"experiment": "no such experiment"})) == []
    listed = api_alice.get("/api/runs/", {"experiment": unrelated.pk}).json()["results"][0]
    assert (listed["experiment"], listed["experiment_name"]) == (unrelated.pk, "demo 2")


@pytest.mark.parametrize(("url", "typo"), [
    ("/api/runs/", "serach"), ("/api/runs/", "search_text"), ("/api/experiments/", "name"),
    ("/api/projects/", "page"), ("/api/tokens/", "q"),
])
def test_an_unknown_query_parameter_is_a_400_naming_it_and_listing_the_valid_ones(api_alice, url, typo) -> None:
    response = api_alice.get(url, {typo: "x", "limit": 5})
    assert response.status_code == 400, response.content[:300]  # before: 200, the parameter ignored
    [error] = response.json()["errors"]
    assert error["field"] == typo
    assert f"unknown query parameter '{typo}'" in error["message"]
    assert "limit" in error["message"] and "offset" in error["message"]


def test_the_message_lists_exactly_what_runs_accept(api_alice) -> None:
    [error] = api_alice.get("/api/runs/", {"q": "sweep"}).json()["errors"]
    assert error["message"].endswith("accepts: experiment, format, limit, offset, search, status")


def test_unknown_parameters_of_a_run_endpoint_are_refused_too(api_alice, alice, team_a, make_experiment) -> None:
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice)
    for url, typo in ((f"/api/runs/{run.pk}/logs/", "since"), (f"/api/runs/{run.pk}/rollouts/", "step"),
                      (f"/api/runs/{run.pk}/metrics/", "key"), (f"/api/runs/{run.pk}/", "expand")):
        response = api_alice.get(url, {typo: "1"})
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == typo, (url, response.content)
    assert api_alice.post(f"/api/runs/{run.pk}/cancel/?force=1").status_code == 400  # nothing cancelled
    run.refresh_from_db()
    assert not run.cancel_requested


def test_a_caller_not_signed_in_hears_401_not_the_parameter_list() -> None:
    response = APIClient().get("/api/runs/", {"serach": "x"})
    assert response.status_code in (401, 403)
    assert "accepts" not in response.content.decode()


FIRST_BUILD_IN_THREADS = """
import threading, django
django.setup()
from policylab.api.query import documented_query_parameters
barrier, failures = threading.Barrier(8), []
def build():
    barrier.wait()
    try:
        documented_query_parameters()
    except Exception as error:
        failures.append(repr(error))
threads = [threading.Thread(target=build) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(failures)
"""


def test_the_documented_parameters_are_built_once_even_when_the_first_requests_arrive_together(tmp_path) -> None:
    """The run page's first metric requests arrive together: drf-spectacular's first schema generation
    raced in two server threads (AttributeError in its extensions' class loading) and answered 500, so
    the page's charts stayed empty. A fresh process, eight threads at once: none fails."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "policylab.settings", "PYTHONPATH": str(repo / "platform"),
           "POLICYLAB_VAR_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", FIRST_BUILD_IN_THREADS], env=env, capture_output=True, text=True,
                          timeout=120, cwd=repo)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


def documented_get_operations() -> list[tuple[str, list[str]]]:
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    return [(path, [p["name"] for p in op.get("parameters", ()) if p.get("in") == "query"])
            for path, ops in paths.items() for method, op in ops.items() if method == "get"]


def test_every_documented_parameter_of_every_endpoint_is_accepted(api_alice, alice, team_a, make_experiment) -> None:
    """Nothing legitimate is refused: each parameter the OpenAPI document lists, sent alone with a plausible
    value, never meets "unknown query parameter" (a wrong value may still be a 400 of its own); `format=json`
    is accepted everywhere, as DRF does."""
    from policylab.accounts.models import ApiToken

    experiment = make_experiment(alice, team_a)
    run = Run.objects.create(experiment=experiment, created_by=alice, status=RunStatus.SUCCEEDED)
    objects = {"runs": run.pk, "experiments": experiment.pk, "tokens": ApiToken.objects.filter(user=alice)[0].pk,
               "rollouts": 1, "teams": team_a.pk, "secrets": "ANY_NAME"}
    checked = 0
    for path, names in documented_get_operations():
        url = re.sub(r"/(\w+)/\{\w+\}", lambda m: f"/{m[1]}/{objects[m[1]]}", path)
        for name in [*names, "format"]:
            value = {"format": "json", "keys": "reward/mean", "x": "step", "source": "metrics", "sort": "step",
                     "success": "true", "latest": "true", "status": "queued", "search": "demo"}.get(name, "1")
            response = api_alice.get(url, {name: value})
            assert "unknown query parameter" not in response.content.decode(), (url, name, response.content[:300])
            assert response.status_code < 500, (url, name)
            checked += 1
    assert checked > 30


def test_the_clients_and_pages_parameters_are_all_documented() -> None:
    """What the policylab client and the pages' scripts send (grep of client/ and frontend/static) is in the
    document, so the check cannot refuse them."""
    from policylab.api import query
    from policylab.api import tracking_views as tracking_api
    from policylab.api import views as api_views

    known = query.documented_query_parameters()
    sent = {
        (api_views.RunList, "GET"): {"status", "experiment", "search", "limit"},
        (api_views.ProjectList, "GET"): {"limit"},
        (tracking_api.RunCheckpoints, "GET"): {"page_size"},
        (tracking_api.RunLogs, "GET"): {"after", "limit"},
        (tracking_api.RunEvents, "GET"): {"after", "limit"},
        (tracking_api.RunMetricsExport, "GET"): {"format"},
        (tracking_api.RunMetrics, "GET"): {"keys", "max_points"},
        (tracking_api.RunRollouts, "GET"): {"step_min", "step_max", "reward_min", "reward_max", "len_min", "len_max",
                                             "stop_reason", "env_tag", "success", "turns_min", "turns_max", "q",
                                             "sort", "latest", "page", "page_size"},
        (tracking_api.RunPromptHistory, "GET"): {"prompt", "compare", "page", "page_size"},
    }
    for key, names in sent.items():
        assert names <= known[key] | query.ALWAYS, (key, names - known[key])
