"""Fixtures shared by every test area: real services, started when the machine lacks them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.services import free_port, redis_answers, start_redis

# Session fixtures for Ray, Celery and the shared test database, registered ONCE here: importing a
# session fixture into several modules makes pytest build one instance per module.
pytest_plugins = ["tests.services"]


def start_redis_server(port: int, workdir: Path) -> subprocess.Popen:
    """Start a throw-away redis-server on `port` (no persistence), wait until it answers, return it."""
    return start_redis(workdir, port).process


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis: $POLICYLAB_TEST_REDIS_URL, else 127.0.0.1:6379 when it answers, else one we start.

    Tests share the server, so each test must use its own key prefix (run ids, stream names).
    Database 15 keeps test keys away from a developer's data in database 0.
    """
    configured = os.environ.get("POLICYLAB_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    if redis_answers("redis://127.0.0.1:6379/0"):
        yield "redis://127.0.0.1:6379/15"
        return
    server = start_redis(tmp_path_factory.mktemp("redis"), free_port())
    try:
        yield server.address
    finally:
        server.stop()
