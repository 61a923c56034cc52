"""The web side as separate processes on the test database: the ASGI server (daphne through runserver:
HTTP + websockets) and the telemetry ingest consumer. Browser tests and the command-line client's tests
talk to it like a user would.

Pages learn about state changes through the Channels layer, so every process that writes a run's state
(this stack, a Celery worker of tests/services.py) must share the layer's Redis and key prefix: pass
`channels_prefix=CELERY_CHANNELS_PREFIX` next to the Celery worker's Redis URL.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings as django_settings

from scripts.services import free_port, service_env, spawn, stop_processes, wait_listening
from tests.services import database_url, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
# The prefix the Celery worker of tests/services.py computes from the same environment (it sets none).
CELERY_CHANNELS_PREFIX = django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]


@dataclass
class TrackingStack:
    url: str
    redis_url: str
    channels_prefix: str


def share_channels(settings, stack: TrackingStack) -> None:
    """Point this test process's Channels layer at the stack's, so that run states the test writes (as the
    supervisor would) reach the pages; `settings` is pytest-django's fixture (restored after the test)."""
    from channels.layers import channel_layers

    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
    hosts = [{**config["hosts"][0], "address": stack.redis_url}]
    settings.CHANNEL_LAYERS = {"default": {**settings.CHANNEL_LAYERS["default"],
                                           "CONFIG": {**config, "hosts": hosts, "prefix": stack.channels_prefix}}}
    channel_layers.backends.clear()


@contextlib.contextmanager
def start_tracking_stack(redis_url: str, runs_dir: Path, work: Path,
                         channels_prefix: str | None = None) -> Iterator[TrackingStack]:
    """daphne (runserver, serving static files too) and the ingest consumer on the test database."""
    channels_prefix = channels_prefix or f"e2e-{uuid.uuid4().hex[:6]}"
    env = service_env(
        {
            "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "CELERY_RESULT_BACKEND": redis_url,
            "POLICYLAB_RUNS_DIR": str(runs_dir),
            "POLICYLAB_VAR_DIR": str(work / "var"),
            "POLICYLAB_CHANNELS_PREFIX": channels_prefix,
            "DJANGO_DEBUG": "1",
            "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,  # the test's sessions must hold there
        }
    )
    port = free_port()
    processes = []
    try:
        for name, args in (
            ("web", ["runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"]),
            ("ingest", ["ingest_events", "--claim-idle-ms", "5000"]),
        ):
            processes.append(spawn([sys.executable, str(REPO_ROOT / "manage.py"), *args], work / f"{name}.log", env))
        wait_listening(port, processes[0], "web server", log_path=work / "web.log")
        yield TrackingStack(url=f"http://127.0.0.1:{port}", redis_url=redis_url, channels_prefix=channels_prefix)
    finally:
        stop_processes(processes, timeout=10)


def off_the_browser_thread(fn: Callable[[], object]) -> None:
    """Run `fn` in a thread of its own: Playwright's sync API keeps an event loop running in the test's
    thread, where Channels' async_to_sync (publishing a run state) refuses to run."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            fn()
        except BaseException as error:  # re-raised in the test's thread
            errors.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def sign_in(page, stack: TrackingStack, user) -> None:
    """A session of `user` (made here) as the browser's cookie."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": stack.url}])


def emitter_for(run, stack: TrackingStack, attempt: int = 1):
    """What the trainer of `attempt` writes: the run's events.jsonl and its Redis Stream."""
    from trainer.telemetry import EventEmitter, JsonlSink
    from trainer.telemetry.redis_stream import RedisStreamSink

    sinks = [JsonlSink(run.run_dir / "events.jsonl"), RedisStreamSink(stack.redis_url, run.trainer_run_id)]
    return EventEmitter(run.trainer_run_id, attempt, sinks)


def ingested(run, seq: int, timeout: float = 20) -> None:
    """Wait until ingest has stored the run's events up to `seq`."""
    from policylab.tracking.models import IngestCursor

    wait_for(lambda: IngestCursor.objects.filter(run=run, last_seq__gte=seq).exists(), timeout,
             f"ingest to reach seq {seq}")
