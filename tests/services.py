"""Reusable session fixtures for tests that need real services beyond Redis: a Ray head and a
Celery worker (+ beat) that share the test database with the test process.

tests/conftest.py registers this module as a plugin, so every test can request these fixtures.

Sharing the database: the worker is another process, so it must see what tests commit. Tests
that use it take `transactional_db` (data is committed, not rolled back), and on SQLite the test
database must be a file: `use_file_sqlite_test_database()` points Django's TEST NAME at a
temporary file (call it at conftest import, before pytest-django creates the database). On
PostgreSQL the worker simply connects to the `test_<name>` database pytest-django created.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlparse, urlunparse

import pytest

from scripts.services import (
    Service,
    free_port,
    start_celery_beat,
    start_celery_worker,
    start_ray_head,
    stop_processes,
)

CLAIM_KEY = "policylab:test-db-claim"


def wait_for(check: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> object:
    """Poll `check` until it returns something truthy; fail the test with `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- Redis: a database number of our own --------------------------------------------------------

def claim_redis_db(redis_url: str) -> tuple[str, Callable[[], None]]:
    """A redis:// URL on the same server with an EMPTY database number (1-14) claimed for this
    session, so Celery queues, locks and streams of concurrent test sessions never mix.
    Returns (url, release); release() empties the claimed database."""
    import redis

    parsed = urlparse(redis_url)
    for db in range(1, 15):
        url = urlunparse(parsed._replace(path=f"/{db}"))
        client = redis.Redis.from_url(url)
        if client.dbsize() == 0 and client.set(CLAIM_KEY, str(os.getpid()), nx=True, ex=6 * 3600):
            def release(client: redis.Redis = client) -> None:
                client.flushdb()
                client.close()

            return url, release
        client.close()
    raise RuntimeError(f"no empty Redis database (1-14) to claim on {redis_url}")


@pytest.fixture(scope="session")
def jobs_redis_url(redis_url: str) -> Iterator[str]:
    url, release = claim_redis_db(redis_url)
    try:
        yield url
    finally:
        release()


# --- Ray ---------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A Ray head of this session's own (free ports, short temp dir), stopped with all it started. It requires
    its token (Ray's token authentication, as the platform starts it): the settings of this process point at
    the token file, as a deployment's do."""
    from django.conf import settings

    port = free_port()
    temp_dir = Path(tempfile.mkdtemp(prefix="plr", dir="/tmp"))  # short: Unix socket paths live here
    head = start_ray_head(tmp_path_factory.mktemp("ray"), dashboard_port=port, num_cpus=8,
                          object_store_memory=256 * 1024 * 1024, temp_dir=temp_dir)
    saved = settings.POLICYLAB_RAY_AUTH_TOKEN_PATH
    settings.POLICYLAB_RAY_AUTH_TOKEN_PATH = Path(head.extra["token_path"])
    try:
        yield head
    finally:
        settings.POLICYLAB_RAY_AUTH_TOKEN_PATH = saved
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


# --- the test database, shared with worker processes ------------------------------------------------

def use_file_sqlite_test_database() -> None:
    """On SQLite, make the test database a file (in-memory ones are invisible to other processes)."""
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    if settings_dict["ENGINE"].endswith("sqlite3"):
        test = settings_dict.setdefault("TEST", {})
        if not test.get("NAME"):
            # A file only (pytest-django deletes it at the end); unique per session.
            test["NAME"] = str(Path(tempfile.gettempdir()) / f"policylab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}.sqlite3")


def database_url() -> str:
    """DATABASE_URL of the database the test process is connected to (the test database)."""
    from django.db import connections

    s = connections["default"].settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        name = str(s["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            raise RuntimeError("the SQLite test database is in memory; call use_file_sqlite_test_database() "
                               "in your conftest so worker processes can share it")
        return f"sqlite:///{name}"
    if "postgresql" in s["ENGINE"]:
        auth = quote(s.get("USER") or "", safe="")
        if s.get("PASSWORD"):
            auth += ":" + quote(s["PASSWORD"], safe="")
        host = s.get("HOST") or "127.0.0.1"
        port = f":{s['PORT']}" if s.get("PORT") else ""
        return f"postgres://{auth}@{host}{port}/{s['NAME']}"
    raise RuntimeError(f"no DATABASE_URL form for engine {s['ENGINE']}")


@pytest.fixture(scope="session")
def shared_test_database(django_db_setup: None, django_db_blocker: object) -> str:
    """The created test database, as a DATABASE_URL other processes can use."""
    return database_url()


# --- Celery ----------------------------------------------------------------------------------------

@dataclass
class CeleryServices:
    """A Celery worker and beat for the tests, sharing the test database. The worker can be killed
    (SIGKILL, as a crash) and started again."""

    env: dict[str, str]
    var_dir: Path
    worker: Service | None = None
    beat: Service | None = None

    def start_worker(self) -> Service:
        self.worker = start_celery_worker(self.env, self.var_dir, concurrency=4, name=f"test-{uuid.uuid4().hex[:6]}")
        return self.worker

    def ensure_worker(self) -> Service:
        """A live worker (and beat), started again if a test stopped, killed or paused them."""
        if self.beat is None or not self.beat.alive():
            self.beat = start_celery_beat(self.env, self.var_dir)
        if self.worker is None or not self.worker.alive():
            return self.start_worker()
        return self.worker

    def pause(self) -> None:
        """Stop worker and beat until the next ensure_worker(). Call it when your tests are done:
        beat's reconcile would otherwise pick up runs that later tests commit to the shared
        database and start supervising them."""
        self.stop()
        self.worker = self.beat = None

    def stop_worker(self, timeout: float = 60.0) -> int | None:
        """Warm shutdown (SIGTERM), as Ctrl-C of the run script does; SIGKILL only after `timeout`.
        Returns the worker's exit code (-9 when it had to be killed)."""
        assert self.worker is not None
        process = self.worker.process
        self.worker.stop(timeout=timeout)
        self.worker = None
        return process.returncode

    def kill_worker(self) -> None:
        assert self.worker is not None
        self.worker.kill()
        self.worker = None

    def stop(self) -> None:
        stop_processes([s.process for s in (self.worker, self.beat) if s is not None], timeout=15.0)


@pytest.fixture(scope="session")
def celery_services(shared_test_database: str, jobs_redis_url: str, ray_head: Service,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryServices]:
    """A real Celery worker (threads pool) and beat in subprocesses, on this session's Redis
    database, Ray head and test database, with short supervision timings. The test process's own
    Celery app is pointed at the same broker, so `.delay()` from tests reaches the worker."""
    from django.conf import settings

    from policylab.celery import app

    var_dir = tmp_path_factory.mktemp("celery")
    env = {
        "DATABASE_URL": shared_test_database,
        "REDIS_URL": jobs_redis_url,
        "CELERY_BROKER_URL": jobs_redis_url,
        "CELERY_RESULT_BACKEND": jobs_redis_url,
        "RAY_ADDRESS": ray_head.address,
        "POLICYLAB_RAY_AUTH_TOKEN_PATH": ray_head.extra["token_path"],
        "POLICYLAB_RUNS_DIR": str(var_dir / "runs"),
        "POLICYLAB_VAR_DIR": str(var_dir),
        "POLICYLAB_SUPERVISOR_POLL_S": "0.5",
        "POLICYLAB_SUPERVISOR_LOCK_TTL_S": "5",
        "POLICYLAB_RECONCILE_INTERVAL_S": "2",
        # Every role in the trainer's driver process: these tests are about supervision, and Ray
        # actors would add ~10 s per role on a 2-core machine (the trainer tests cover them).
        "POLICYLAB_TRAINER_ARGS": "--workers local",
        "DJANGO_SETTINGS_MODULE": "policylab.settings",
    }
    saved = {name: getattr(settings, name) for name in ("REDIS_URL", "RAY_ADDRESS", "POLICYLAB_SUPERVISOR_LOCK_TTL_S")}
    settings.REDIS_URL = jobs_redis_url
    settings.RAY_ADDRESS = ray_head.address
    settings.POLICYLAB_SUPERVISOR_LOCK_TTL_S = 5.0
    saved_conf = (app.conf.broker_url, app.conf.result_backend)
    app.conf.broker_url = app.conf.result_backend = jobs_redis_url
    app.close()  # drop pooled connections to the previous broker

    services = CeleryServices(env=env, var_dir=var_dir)
    try:
        services.beat = start_celery_beat(env, var_dir)
        services.start_worker()
        yield services
    finally:
        services.stop()
        app.conf.broker_url, app.conf.result_backend = saved_conf
        app.close()
        for name, value in saved.items():
            setattr(settings, name, value)


@pytest.fixture
def live_celery(celery_services: CeleryServices) -> Iterator[CeleryServices]:
    """The session's Celery worker and beat, live for one test (started again if an earlier module
    paused them) and paused afterwards, so that beat never supervises runs of later tests."""
    celery_services.ensure_worker()
    yield celery_services
    celery_services.pause()
