"""scripts/services.py: start, health-check and stop only what it started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from scripts.services import REPO_ROOT, _proc_table, _spawn, redis_answers, service_env, start_redis

SPAWNER = """
import subprocess, sys, time
# a grandchild in a session of its own, like a Ray job driver
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_redis_starts_answers_and_stops(tmp_path: Path) -> None:
    redis = start_redis(tmp_path)
    assert redis_answers(redis.address)
    redis.stop()
    assert not redis.alive() and not redis_answers(redis.address)


def test_stop_kills_descendants_that_left_the_session(tmp_path: Path) -> None:
    log = tmp_path / "spawner.log"
    service = _spawn("spawner", [sys.executable, "-c", SPAWNER], log, "", service_env())
    deadline = time.monotonic() + 30
    while not log.read_text().strip():
        assert time.monotonic() < deadline, "spawner printed nothing"
        time.sleep(0.1)
    grandchild = int(log.read_text().split()[0])
    assert grandchild in _proc_table()
    service.stop(timeout=5)
    time.sleep(0.2)
    assert grandchild not in _proc_table()
    assert not service.alive()


def test_cli_rejects_unknown_services() -> None:
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "services.py"), "up", "--only", "redis,mongo"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "mongo" in result.stderr and "valid: redis, ray" in result.stderr


def test_asgi_server_serves_the_app_and_stops(shared_test_database: str, jobs_redis_url: str, tmp_path: Path) -> None:
    import urllib.request

    from scripts.services import free_port, start_asgi

    port = free_port()
    web = start_asgi({"DATABASE_URL": shared_test_database, "REDIS_URL": jobs_redis_url}, tmp_path, port=port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=30) as response:
            assert response.status == 200 and b"<form" in response.read()
    finally:
        web.stop()
    assert not web.alive()
