"""Fixtures shared by every test area: real services, started when the machine lacks them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis_server(port: int, workdir: Path) -> subprocess.Popen:
    """Start a throw-away redis-server on `port` (no persistence) and wait until it answers."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: run `bash scripts/setup.sh` (apt-get install redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not redis_reachable("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"redis-server on port {port} did not start")
        time.sleep(0.05)
    return proc


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
    if redis_reachable("127.0.0.1", 6379):
        yield "redis://127.0.0.1:6379/15"
        return
    port = free_port()
    proc = start_redis_server(port, tmp_path_factory.mktemp("redis"))
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
