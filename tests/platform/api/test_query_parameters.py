"""Query parameters: `GET /api/runs/?search=` finds runs by name and `?experiment=` takes a name; a parameter
an endpoint does not know is a 400 naming it and listing the valid ones (it was silently ignored), while
every parameter the OpenAPI document lists, on every endpoint, is still accepted."""

from __future__ import annotations

import re

import pytest

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
    objects = {"runs": run.pk, "experiments": experiment.pk, "tokens": ApiToken.objects.filter(user=alice)[0].pk}
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
    }
    for key, names in sent.items():
        assert names <= known[key] | query.ALWAYS, (key, names - known[key])
