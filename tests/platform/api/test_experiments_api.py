"""REST API: experiments from JSON or YAML, bad configs answer 400 by field, runs, OpenAPI."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylab.experiments.models import Experiment, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def project_id(api_alice) -> int:
    response = api_alice.get("/api/projects/")
    if response.json()["results"]:
        return response.json()["results"][0]["id"]
    from policylab.accounts.models import Team

    team = Team.objects.get(slug="team-a")
    return api_alice.post("/api/projects/", {"team": team.pk, "name": "proj"}, format="json").json()["id"]


def test_create_from_yaml_text_and_from_a_json_object_gives_the_same_snapshot(api_alice, project_id, demo_yaml):
    from_yaml = api_alice.post(
        "/api/experiments/", {"project": project_id, "name": "y", "config": demo_yaml, "tags": ["demo"]}, format="json"
    )
    assert from_yaml.status_code == 201, from_yaml.json()
    from_json = api_alice.post(
        "/api/experiments/", {"project": project_id, "name": "j", "config": yaml.safe_load(demo_yaml)}, format="json"
    )
    assert from_json.status_code == 201
    # ${pretrain} and ${response_length} were resolved; the hash is of the resolved config.
    assert from_yaml.json()["config"]["actor_train"]["model_args"]["model_name_or_path"] == "tiny://tiny?seed=0"
    assert from_yaml.json()["config_hash"] == from_json.json()["config_hash"]
    assert from_yaml.json()["source_format"] == "roll"
    detail = api_alice.get(f"/api/experiments/{from_yaml.json()['id']}/").json()
    assert detail["tags"] == ["demo"] and "rollout_batch_size: 16" in detail["config_yaml"]


def mutate(path: str, value):
    def apply(config: dict) -> None:
        *parents, leaf = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value

    return apply


DELETE = object()

# Representative rules, sent as JSON and as YAML text (test_config_rules_api.py replays the config
# engineer's whole table): (what to change in the demo config, the field the error must name).
BAD_CONFIGS = [
    ("unknown key with a typo", mutate("rollout_batch_sizee", 4), "rollout_batch_sizee"),
    ("wrong type", mutate("actor_train.training_args.learning_rate", "fast"), "actor_train.training_args.learning_rate"),
    ("out of range", mutate("actor_train.training_args.learning_rate", -1), "actor_train.training_args.learning_rate"),
    ("not an allowed value", mutate("adv_estimator", "foo"), "adv_estimator"),
    ("batch arithmetic", mutate("rollout_batch_size", 3), "actor_train.training_args.per_device_train_batch_size"),
    ("mutually exclusive options", mutate("actor_train.data_args.messages", "chat"), "actor_train.data_args.messages"),
    ("a required section missing", mutate("rewards", DELETE), "rewards"),
    ("gae without a critic", mutate("adv_estimator", "gae"), "critic"),
    ("unknown strategy", mutate("actor_train.strategy_args.strategy_name", "bogus"), "actor_train.strategy_args.strategy_name"),
    ("a section that is not a mapping", mutate("actor_train", [1, 2]), "actor_train"),
]


@pytest.mark.parametrize(("label", "change", "field"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_every_invalid_config_is_a_400_naming_the_field_and_saves_nothing(
    api_alice, project_id, demo_yaml, label, change, field
):
    config = copy.deepcopy(yaml.safe_load(demo_yaml))
    if label == "mutually exclusive options":
        config["actor_train"]["data_args"]["prompt"] = "question"
    change(config)
    for body in (config, yaml.safe_dump(config)):
        response = api_alice.post("/api/experiments/", {"project": project_id, "name": label, "config": body}, format="json")
        assert response.status_code == 400, response.content
        errors = response.json()["errors"]
        assert field in [e["field"] for e in errors], errors
        assert all(e["message"] for e in errors)
        check = api_alice.post("/api/configs/validate/", {"config": body}, format="json")
        assert check.status_code == 400 and field in [e["field"] for e in check.json()["errors"]]
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        "not json at all",
        json.dumps([1, 2, 3]),
        json.dumps({"project": "x", "name": "n", "config": "a: [1, 2\nb: c"}),
        json.dumps({"name": "n", "config": 5}),
        json.dumps({"project": 10**12, "name": "n", "config": {}}),
        json.dumps({"project": 1, "name": "", "config": "exp_name: x\nmax_steps: ${nope}\n"}),
        json.dumps({"project": 1, "name": "n", "config": "- just\n- a list\n"}),
        json.dumps({"project": 1, "name": "n", "config": {}, "overrides": ["no equals sign"]}),
        json.dumps({"project": 1, "name": "n", "config": {}, "overrides": 7}),
    ],
)
def test_garbage_is_a_400_never_a_500(api_alice, project_id, body):
    body = body.replace('"project": 1', f'"project": {project_id}')
    response = api_alice.generic("POST", "/api/experiments/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["errors"]
    assert not Experiment.objects.exists()


def test_validate_reports_derived_values_format_and_yaml(api_alice, demo_yaml):
    response = api_alice.post("/api/configs/validate/", {"config": demo_yaml}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] and body["source_format"] == "roll"
    assert body["derived"]["actor_train.optimizer_steps_per_rollout"] == 16 * 8 // 64
    assert yaml.safe_load(body["yaml"])["rollout_batch_size"] == 16


def test_config_schema_is_the_trainers(api_alice):
    from trainer.config import config_json_schema

    assert api_alice.get("/api/config-schema/").json() == json.loads(json.dumps(config_json_schema()))


def test_launch_creates_a_queued_run_and_hands_it_to_jobs(api_alice, alice, team_a, make_experiment,
                                                         django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, team_a)
    with django_capture_on_commit_callbacks() as callbacks:
        response = api_alice.post(f"/api/experiments/{experiment.pk}/runs/", {"overrides": ["max_steps=5"]}, format="json")
    assert response.status_code == 201, response.json()
    run = Run.objects.get(pk=response.json()["id"])
    assert run.status == "queued" and run.overrides == ["max_steps=5"] and run.created_by == alice
    assert len(callbacks) == 1  # signals.run_queued for jobs, after the transaction commits
    bad = api_alice.post(f"/api/experiments/{experiment.pk}/runs/", {"overrides": ["max_steps=-3"]}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "max_steps"
    assert Run.objects.count() == 1
    listed = api_alice.get(f"/api/experiments/{experiment.pk}/runs/").json()["results"]
    assert [r["id"] for r in listed] == [run.pk]


def test_openapi_document_validates():
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


def test_openapi_document_describes_the_endpoints_and_bearer_tokens():
    from drf_spectacular.generators import SchemaGenerator

    document = SchemaGenerator().get_schema(request=None, public=True)
    for path in ("/api/experiments/", "/api/experiments/{id}/runs/", "/api/runs/{id}/fork/", "/api/configs/validate/",
                 "/api/config-schema/", "/api/tokens/{id}/"):
        assert path in document["paths"], path
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    create = document["paths"]["/api/experiments/"]["post"]
    assert {"201", "400"} <= set(create["responses"])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
CONFIG_KEYS = st.sampled_from(["rollout_batch_size", "actor_train", "adv_estimator", "rewards", "data", "trainer",
                               "actor_rollout_ref", "device_mapping", "max_steps", "x"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=st.dictionaries(CONFIG_KEYS, JSON, max_size=4) | JSON, overrides=JSON)
def test_random_configs_are_never_a_500(api_alice, config, overrides):
    for body in ({"config": config}, {"config": config, "overrides": overrides}):
        response = api_alice.post("/api/configs/validate/", body, format="json")
        assert response.status_code in (200, 400), response.content
        assert "errors" in response.json()
