"""Schemathesis over the whole OpenAPI document: no operation answers a server error.

Requests go in-process through Django's WSGI application (no server, no network), authenticated
with a real API token of a test team, inside the test's database transaction. Launch, resume and
cancel only queue their Celery work with `transaction.on_commit`, which never fires in a rolled-back
test transaction: no Ray job is started.

Bounded for the 2-core CI machine: a few derandomized examples per operation (POLICYLAB_FUZZ_EXAMPLES
raises it for a deeper local run), and half of the path ids point at real objects of the team, so the
generated bodies reach the serializers and services instead of stopping at a 404.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import content_type_conformance, not_a_server_error, response_schema_conformance

from policylab.accounts.models import ApiToken
from policylab.accounts.services import create_api_token
from policylab.experiments.models import Project, Run, RunStatus
from policylab.wsgi import application

MAX_EXAMPLES = int(os.environ.get("POLICYLAB_FUZZ_EXAMPLES", "12"))
# What "conform" means here: never a 5xx, JSON where JSON is declared, and 2xx bodies that match their
# schema. Error statuses are not all declared (401, 404 of every operation), so status codes are not checked.
CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance]


def load_schema() -> schemathesis.BaseSchema:
    """The document /api/schema/ serves, generated in-process (fetching it through the WSGI app would
    touch the database outside any test), with calls going through the WSGI app."""
    document = json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))
    loaded = schemathesis.openapi.from_dict(document)
    loaded.app = application
    return loaded


schema = load_schema()


@pytest.fixture
def in_test_transaction() -> Iterator[None]:
    """Django's handler closes the database connection at each request's start and end; inside the
    test's transaction that would lose it (Django's own test client unhooks the same signal)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def team_objects(db, alice, team_a, make_experiment) -> dict[str, int]:
    """Real objects of alice's team for the generated path ids to hit, and her token's secret."""
    experiment = make_experiment(alice, team_a)
    run = Run.objects.create(experiment=experiment, created_by=alice, status=RunStatus.FAILED)
    issued = create_api_token(alice, team_a, "fuzz")
    spare = create_api_token(alice, team_a, "spare")  # DELETE /api/tokens/{pk}/ revokes this one, not ours
    return {
        "secret": issued.secret,
        "experiments": experiment.pk,
        "runs": run.pk,
        "projects": Project.objects.get(team=team_a).pk,
        "tokens": spare.token.pk,
    }


def aim_at_real_objects(case, objects: dict[str, int]) -> None:
    """Every even generated id is replaced by the id of a real object of the same kind; token ids
    always name the spare token (the fuzz token revoking itself would end the run's authentication)."""
    params = case.path_parameters or {}
    for name in ("id", "run_id"):
        if name not in params:
            continue
        kind = next((k for k in ("experiments", "runs", "tokens") if f"/{k}/" in case.path), "runs")
        if kind == "tokens" or (isinstance(params[name], int) and params[name] % 2 == 0):
            params[name] = objects[kind]


@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_operation_answers_a_server_error(case, team_objects, in_test_transaction):
    aim_at_real_objects(case, team_objects)
    response = case.call(headers={"Authorization": f"Bearer {team_objects['secret']}"})
    case.validate_response(response, checks=CHECKS)
    assert ApiToken.objects.filter(name="fuzz", revoked_at__isnull=True).exists()
