"""Django for the platform tests, and the people, teams and experiments they share.

Django is configured here (on import) because the app conftests below import models.
Run on PostgreSQL with DATABASE_URL=postgres://postgres@127.0.0.1:5432/policylab (pytest-django
creates and drops test_policylab).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")

import django

django.setup()

import pytest  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from policylab.accounts.models import Membership, Role, Team  # noqa: E402
from policylab.accounts.services import create_api_token  # noqa: E402
from policylab.experiments import services  # noqa: E402
from policylab.experiments.models import Experiment, Project  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = (REPO_ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()


@pytest.fixture(autouse=True)
def isolated_runs_dir(settings, tmp_path: Path) -> None:
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    # Configs in these tests name models under /models (never read); runs may read from there.
    settings.POLICYLAB_READ_ROOTS = [*settings.POLICYLAB_READ_ROOTS, "/models"]
    # Real password hashing costs ~0.3 s a user on this machine; the tests are about access, not hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def demo_yaml() -> str:
    return DEMO_YAML


def make_member(username: str, team: Team, role: str = Role.MEMBER):
    user = get_user_model().objects.create_user(username, password=f"pw-{username}-123456")
    Membership.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def team_a(db) -> Team:
    return Team.objects.create(name="Team A", slug="team-a")


@pytest.fixture
def team_b(db) -> Team:
    return Team.objects.create(name="Team B", slug="team-b")


@pytest.fixture
def alice(team_a):
    """A member of team A."""
    return make_member("alice", team_a)


@pytest.fixture
def victor(team_a):
    """A viewer of team A (read only)."""
    return make_member("victor", team_a, Role.VIEWER)


@pytest.fixture
def bob(team_b):
    """A member of team B."""
    return make_member("bob", team_b)


@pytest.fixture
def make_experiment(demo_yaml) -> Callable[..., Experiment]:
    """make_experiment(user, team, name="demo") -> an experiment made through the service."""

    def make(user, team: Team, name: str = "demo", source=None) -> Experiment:
        project, _ = Project.objects.get_or_create(team=team, name="proj")
        return services.create_experiment(project, name, source or demo_yaml, user=user)

    return make


def token_client(user, team: Team) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token(user, team, 'tests').secret}")
    return client


@pytest.fixture
def api_alice(alice, team_a) -> APIClient:
    return token_client(alice, team_a)


@pytest.fixture
def api_bob(bob, team_b) -> APIClient:
    return token_client(bob, team_b)
