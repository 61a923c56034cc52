"""What the platform benchmarks (ingest.py, run_page.py) share: Django on a fresh database with one run of
a bench team, and waiting for a server they started to listen."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any


def wait_port(port: int, process: subprocess.Popen, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{what} did not start (exit {process.poll()})") from None
            time.sleep(0.2)


def bench_run(database_url: str, redis_url: str, work: Path, **run_fields: Any) -> tuple[Any, str]:
    """Configure Django on `database_url` (migrated here), make a user, team, project and experiment and one
    run with `run_fields`; returns (run, the user's session key for the session cookie)."""
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
