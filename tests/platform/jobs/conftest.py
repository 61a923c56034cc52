"""Fixtures of the jobs tests: a real Ray head, a real Celery worker + beat, and the test database
shared with them (SQLite as a file; see tests/services.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services import use_file_sqlite_test_database

use_file_sqlite_test_database()


@pytest.fixture
def ray_client(ray_head):
    from policylab.jobs import ray_jobs

    return ray_jobs.connect(ray_head.address)


@pytest.fixture
def redis_db(jobs_redis_url: str, settings):
    """A client on this session's own Redis database; settings.REDIS_URL points at it too."""
    import redis

    settings.REDIS_URL = jobs_redis_url
    client = redis.Redis.from_url(jobs_redis_url)
    yield client
    client.close()


@pytest.fixture
def worker_runs_dir(celery_services, settings) -> Path:
    """The runs directory the Celery worker uses; the test process looks at the same one."""
    settings.POLICYLAB_RUNS_DIR = Path(celery_services.env["POLICYLAB_RUNS_DIR"])
    return settings.POLICYLAB_RUNS_DIR
