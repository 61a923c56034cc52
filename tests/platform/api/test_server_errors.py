"""Inputs that used to answer 500 (issue 10): each is now a 4xx that names the problem.

Django's test client re-raises a view's exception, so on the old code each test failed with the
exception that made the 500 (OverflowError, RecursionError, UnicodeEncodeError).
"""

from __future__ import annotations

import pytest
from django.test import Client

from policylab.experiments.config_editor import FormField, validation_payload
from policylab.experiments.models import Run

pytestmark = pytest.mark.django_db

BEYOND_64_BITS = "9" * 25
INT64_MAX_PLUS_1 = str(2**63)


def errors_of(response) -> list[dict[str, str]]:
    body = response.json()
    assert set(body) >= {"errors", "warnings"}, body
    return body["errors"]


@pytest.mark.parametrize(("url", "param"), [("/api/runs/", "experiment"), ("/api/experiments/", "project")])
@pytest.mark.parametrize("value", [BEYOND_64_BITS, INT64_MAX_PLUS_1])
def test_ids_beyond_64_bits_in_query_params_answer_400_naming_the_param(api_alice, url, param, value):
    response = api_alice.get(url, {param: value})
    assert response.status_code == 400
    assert [e["field"] for e in errors_of(response)] == [param]


def test_the_largest_64_bit_id_is_still_a_plain_miss(api_alice):
    response = api_alice.get("/api/runs/", {"experiment": str(2**63 - 1)})
    assert response.status_code == 200 and response.json()["results"] == []


def test_compare_page_treats_ids_beyond_64_bits_as_missing(alice, team_a, make_experiment):
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice)
    client = Client()
    client.force_login(alice)
    response = client.get("/compare/", {"runs": f"{BEYOND_64_BITS},{run.pk}"})
    assert response.status_code == 200
    assert response.context["run_ids"] == [run.pk]


@pytest.mark.parametrize("param", ["limit", "offset"])
def test_limit_and_offset_beyond_64_bits_do_not_reach_the_database(api_alice, alice, team_a, make_experiment, param):
    experiment = make_experiment(alice, team_a)
    for _ in range(3):
        Run.objects.create(experiment=experiment, created_by=alice)
    response = api_alice.get("/api/runs/", {param: INT64_MAX_PLUS_1})
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    # a huge limit is capped (all 3 fit); a huge offset is past the end (an empty page)
    assert len(body["results"]) == (3 if param == "limit" else 0)


def test_limit_is_capped(api_alice):
    from policylab.api.pagination import BoundedLimitOffsetPagination

    assert BoundedLimitOffsetPagination.max_limit is not None and BoundedLimitOffsetPagination.max_limit <= 1000


def test_a_deeply_nested_json_body_answers_400_naming_the_limit(api_alice):
    response = api_alice.generic("POST", "/api/configs/validate/", "[" * 200_000, content_type="application/json")
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert "nested" in error["message"] and "64" in error["message"]


def test_a_deep_list_in_tracker_kwargs_answers_400(api_alice):
    deep: list = []
    for _ in range(900):
        deep = [deep]
    body = {"config": {"exp_name": "x", "tracker_kwargs": {"deep": deep}}}
    response = api_alice.post("/api/configs/validate/", body, format="json")
    assert response.status_code == 400
    assert any("nested" in e["message"] for e in errors_of(response))


def test_the_config_editor_survives_a_deep_structure_that_reached_it():
    """The JSON parser stops deep bodies first; the editor must not crash on one that got past."""
    deep: list = []
    for _ in range(900):
        deep = [deep]
    payload = validation_payload({"exp_name": "x", "tracker_kwargs": {"deep": deep}})
    assert payload["ok"] is False and payload["errors"]
    assert isinstance(payload["yaml"], str)
    assert isinstance(FormField(path="a", name="a", kind="yaml", value=deep).input_value, str)


def test_a_deep_yaml_value_in_an_editor_form_field_answers_errors_not_500(alice, team_a):
    client = Client()
    client.force_login(alice)
    response = client.post("/editor/check/", {"editor_mode": "form", "tracker_kwargs": "[" * 900 + "]" * 900})
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and [e["field"] for e in body["errors"]] == ["tracker_kwargs"]


@pytest.mark.parametrize("where", ["name", "config_value", "key"])
def test_a_lone_surrogate_in_a_json_body_answers_400(api_alice, where):
    bodies = {
        "name": '{"project": 1, "name": "\\ud800", "config": {}}',
        "config_value": '{"config": {"exp_name": "a\\udfffb"}}',
        "key": '{"config": {"\\ud83d": 1}}',
    }
    url = "/api/experiments/" if where == "name" else "/api/configs/validate/"
    response = api_alice.generic("POST", url, bodies[where], content_type="application/json")
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert "surrogate" in error["message"]


@pytest.mark.parametrize("where", ["name", "config_value", "key"])
def test_a_nul_in_a_json_body_answers_400_naming_where(api_alice, where):
    """PostgreSQL's text and jsonb refuse NUL: stored, it was a 500 from the driver (SQLite took it)."""
    bodies = {
        "name": '{"project": 1, "name": "a\\u0000b", "config": {}}',
        "config_value": '{"config": {"exp_name": "a\\u0000b"}}',
        "key": '{"config": {"exp\\u0000name": 1}}',
    }
    url = "/api/experiments/" if where == "name" else "/api/configs/validate/"
    response = api_alice.generic("POST", url, bodies[where], content_type="application/json")
    assert response.status_code == 400
    (error,) = errors_of(response)
    assert "NUL" in error["message"] and {"name": "name", "config_value": "config.exp_name",
                                            "key": "config.exp\\x00name"}[where] in error["message"]


def test_a_yaml_nul_escape_in_a_new_experiment_is_refused_or_stored_without_a_server_error(api_alice, team_a):
    """YAML's "\\0" escape makes a NUL that no JSON parser saw; creating the experiment must not be a 500."""
    project = api_alice.post("/api/projects/", {"team": team_a.pk, "name": "nul"}, format="json").json()["id"]
    response = api_alice.post("/api/experiments/", {"project": project, "name": "nul",
                                                    "config": 'exp_name: "a\\0b"\n'}, format="json")
    assert response.status_code in (201, 400), response.content
    response.json()


def test_a_valid_surrogate_pair_is_just_a_character(api_alice):
    response = api_alice.generic(
        "POST", "/api/configs/validate/", '{"config": {"exp_name": "run \\ud83d\\ude00"}}', content_type="application/json"
    )
    assert response.status_code in (200, 400)
    assert response.json()["config"] is None or response.json()["config"]["exp_name"] == "run \U0001f600"


def test_a_lone_surrogate_reaching_the_renderer_does_not_crash_it(api_alice):
    """YAML's "\\ud800" escape makes a lone surrogate that no JSON parser saw."""
    response = api_alice.post("/api/configs/validate/", {"config": 'exp_name: "\\ud800"\n'}, format="json")
    assert response.status_code in (200, 400)
    response.json()


def test_form_encoded_bodies_still_parse(api_alice, team_a):
    response = api_alice.post("/api/projects/", {"team": team_a.pk, "name": "form-made"})
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "form-made"
