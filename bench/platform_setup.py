"""What the platform benchmarks (ingest.py, run_page.py) share: Django on a fresh database with one run of
a bench team. Starting, waiting for and stopping their servers: scripts/services.py (spawn, wait_listening,
stop_processes), which tests/platform/web_stack.py uses too."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scripts.services import PLATFORM_DIR, free_port, service_env, spawn, wait_listening

# What bench_run configured, for the servers a benchmark starts.
BENCH_ENV = ("DATABASE_URL", "REDIS_URL", "POLICYLAB_VAR_DIR", "POLICYLAB_RUNS_DIR", "POLICYLAB_LOG_LEVEL")


def ensure_database(database_url: str) -> None:
    """Create the PostgreSQL database `database_url` names when the server lacks it (the README's commands name
    policylab_bench, which a fresh server does not have); SQLite creates its file itself."""
    parts = urlsplit(database_url)
    if parts.scheme not in ("postgres", "postgresql"):
        return
    import psycopg
    from psycopg import sql

    name = parts.path.lstrip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as admin:
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def bench_run(database_url: str, redis_url: str, work: Path, **run_fields: Any) -> tuple[Any, str]:
    """Configure Django on `database_url` (created if need be, migrated here), make a user, team, project and
    experiment and one run with `run_fields`; returns (run, the user's session key for the session cookie)."""
    ensure_database(database_url)
    os.environ.update({"DATABASE_URL": database_url, "REDIS_URL": redis_url, "POLICYLAB_VAR_DIR": str(work),
                       "POLICYLAB_RUNS_DIR": str(work / "runs"), "DJANGO_SETTINGS_MODULE": "policylab.settings",
                       "POLICYLAB_LOG_LEVEL": "WARNING"})
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from policylab.accounts.models import Membership, Team
    from policylab.experiments.models import Experiment, Project, Run

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password=uuid.uuid4().hex)
    team = Team.objects.create(name="Bench", slug=f"bench-{uuid.uuid4().hex[:6]}")
    Membership.objects.create(user=user, team=team, role="member")
    project = Project.objects.create(team=team, name="bench")
    experiment = Experiment.objects.create(project=project, name="bench", config={}, config_yaml="", config_hash="0")
    run = Run.objects.create(experiment=experiment, **run_fields)
    client = Client()
    client.force_login(user)
    return run, client.cookies[settings.SESSION_COOKIE_NAME].value


def server_env() -> dict[str, str]:
    """The environment of a server a benchmark starts: the settings bench_run configured."""
    return service_env({k: os.environ[k] for k in BENCH_ENV})


def start_daphne(env: dict[str, str], work: Path) -> tuple[subprocess.Popen, int]:
    """daphne serving the platform (static files through WhiteNoise, as in production) on a free port, its
    output in work/daphne.log; returns (the process, its port) once it listens."""
    port = free_port()
    server = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "policylab.asgi:application"],
                   work / "daphne.log", env, cwd=PLATFORM_DIR)
    wait_listening(port, server, "daphne", timeout=90, log_path=work / "daphne.log")
    return server, port
