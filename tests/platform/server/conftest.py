"""The web server as production runs it (daphne serving policylab.asgi, DEBUG off) on the test database, for
what only a real server shows: websockets that must close while open, handshakes, request bodies as they
arrive on the socket, the server process's memory. SQLite as a file (see tests/services.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from scripts.services import Service, free_port, start_asgi
from tests.platform.web_stack import TrackingStack, share_channels
from tests.services import database_url, use_file_sqlite_test_database

use_file_sqlite_test_database()


@dataclass
class Server:
    service: Service
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.service.process.pid

    def log(self) -> str:
        return self.service.log_path.read_text(errors="replace")


@pytest.fixture
def start_server(transactional_db, redis_url: str, settings, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """start_server(**env) -> a daphne of this test's own (a Channels prefix of its own, which this test
    process shares, so what the test writes reaches the server's sockets as a supervisor's write would)."""
    from channels.layers import channel_layers

    started: list[Service] = []
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"

    def start(**env: str) -> Server:
        prefix = f"srv-{uuid.uuid4().hex[:8]}"
        port = free_port()
        var = tmp_path / f"var-{port}"
        service = start_asgi({
            "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url,
            "POLICYLAB_CHANNELS_PREFIX": prefix,
            "POLICYLAB_RUNS_DIR": str(settings.POLICYLAB_RUNS_DIR),
            "POLICYLAB_VAR_DIR": str(var),
            "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,  # the test's sessions must hold there
            "DJANGO_DEBUG": "0",
            **env,
        }, var, port=port)
        started.append(service)
        share_channels(settings, TrackingStack(url=f"http://127.0.0.1:{port}", redis_url=redis_url,
                                               channels_prefix=prefix))
        return Server(service, port)

    try:
        yield start
    finally:
        for service in started:
            service.stop()
        channel_layers.backends.clear()
