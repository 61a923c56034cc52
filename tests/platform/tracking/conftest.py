"""Fixtures of the tracking tests: teams with runs, a real Redis channel layer, run directories."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from channels.layers import channel_layers
from django.contrib.auth import get_user_model

from policylab.accounts.models import Membership, Role, Team
from policylab.experiments.models import Experiment, Project, Run

CONFIG = {"exp_name": "demo", "max_steps": 20, "rollout_batch_size": 4, "actor_train": {"training_args": {"learning_rate": 1e-5}}}


@pytest.fixture
def make_run(db) -> Callable[..., Run]:
    """make_run(team_slug="a", user=None, config=None, **run_fields) -> a Run in that team (created on demand)."""

    def make(team_slug: str = "alpha", *, user=None, config: dict | None = None, name: str = "exp", tags=(), **fields) -> Run:
        team, _ = Team.objects.get_or_create(slug=team_slug, defaults={"name": team_slug.title()})
        if user is not None:
            Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.MEMBER})
        project, _ = Project.objects.get_or_create(team=team, name="proj")
        experiment = Experiment.objects.create(
            project=project, name=name, config=config or CONFIG, config_yaml="", config_hash=uuid.uuid4().hex, tags=list(tags)
        )
        return Run.objects.create(experiment=experiment, **fields)

    return make


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("ada", password="pw-ada-123456")


@pytest.fixture
def other_user(db):
    return get_user_model().objects.create_user("bob", password="pw-bob-123456")


@pytest.fixture
def runs_dir(settings, tmp_path: Path) -> Path:
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    return settings.POLICYLAB_RUNS_DIR


@pytest.fixture(autouse=True)
def channel_layer_redis(settings, redis_url: str) -> Iterator[str]:
    """The real Redis channel layer (every test: ingest publishes), under a key prefix of this test's own."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                **settings.CHANNEL_LAYERS["default"]["CONFIG"],
                "hosts": [{**settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0], "address": redis_url}],
                "prefix": f"policylab-test:{uuid.uuid4().hex[:8]}",
            },
        }
    }
    channel_layers.backends.clear()
    yield redis_url
    channel_layers.backends.clear()


@pytest.fixture
def redis_client(redis_url: str):
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def event(kind: str, run_id, seq: int, step: int, data: dict, attempt: int = 1, time: float | None = None) -> dict:
    """One telemetry event in the contract's v1 format."""
    return {"v": 1, "type": kind, "run_id": str(run_id), "attempt": attempt, "seq": seq, "step": step,
            "time": 1_763_800_000.0 + seq if time is None else time, "data": data}
