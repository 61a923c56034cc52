"""Database work with a time budget, stopped as soon as the client that asked for it has gone.

A search over a run's rollouts is the user's to shape, so its cost is bounded twice: the search itself
is linear (a substring, never a user's regular expression), and `query_budget` interrupts the queries
of a block once it runs past its budget or once the HTTP client disconnects (`ClientGone` below marks
the request when the ASGI server reports the disconnect; Django 5 then cancels an async view, but a
sync view's thread, and the database behind it, would go on). Interrupting is the driver's own
thread-safe cancel: sqlite3's `interrupt()`, psycopg's `cancel()`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.db import DatabaseError, connections

CLIENT_GONE_KEY = "policylab.client_gone"  # the ASGI scope's threading.Event, set on http.disconnect
POLL_S = 0.05


class QueryStopped(Exception):
    """The block's queries were interrupted: `reason` is "time" (past the budget) or "client gone"."""

    def __init__(self, reason: str, seconds: float) -> None:
        self.reason = reason
        self.seconds = seconds
        super().__init__(f"stopped after {seconds:.1f} s ({reason})")


def client_gone(request: Any) -> threading.Event | None:
    """The event ClientGone sets when `request`'s client disconnects (None outside ASGI: tests, WSGI)."""
    scope = getattr(request, "scope", None)
    return scope.get(CLIENT_GONE_KEY) if isinstance(scope, dict) else None


def interrupt(connection: Any) -> None:
    """Stop the statement running on `connection` (a Django connection), from any thread."""
    raw = connection.connection
    if raw is None:
        return
    if connection.vendor == "sqlite":
        raw.interrupt()
    else:  # psycopg 3 (cancel_safe since 3.2) or psycopg2
        (getattr(raw, "cancel_safe", None) or raw.cancel)()


@contextlib.contextmanager
def query_budget(seconds: float, gone: threading.Event | None = None, using: str = "default") -> Iterator[None]:
    """Queries on `using` inside the block are interrupted after `seconds`, or once `gone` is set; the
    block then raises QueryStopped. Nothing is interrupted after the block has left (a lock orders it)."""
    connection = connections[using]
    connection.ensure_connection()
    started = time.monotonic()
    finished = threading.Event()
    lock = threading.Lock()
    stopped: list[str] = []

    def watch() -> None:
        while not finished.wait(POLL_S):
            reason = "client gone" if gone is not None and gone.is_set() else (
                "time" if time.monotonic() - started > seconds else None)
            if reason:
                with lock:
                    if not finished.is_set():
                        stopped.append(reason)
                        interrupt(connection)
                return

    watcher = threading.Thread(target=watch, name="query-budget", daemon=True)
    watcher.start()
    try:
        yield
    except DatabaseError as exc:
        if stopped:
            raise QueryStopped(stopped[0], time.monotonic() - started) from exc
        raise
    finally:
        with lock:
            finished.set()
        watcher.join()


class ClientGone:
    """ASGI middleware: gives each HTTP request a threading.Event (scope[CLIENT_GONE_KEY]) that is set when
    the server reports the client's disconnect, so work done for it in a thread can stop (query_budget)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        gone = threading.Event()

        async def watched_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            return message

        return await self.app({**scope, CLIENT_GONE_KEY: gone}, watched_receive, send)
