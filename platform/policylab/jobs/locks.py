"""One supervisor per run: a Redis lock whose TTL the supervisor refreshes on every heartbeat.

A second supervisor for the same run fails to acquire it and does nothing; a supervisor whose
worker died stops refreshing, the key expires after `ttl` seconds, and reconcile_runs hands the
run to a new supervisor. A supervisor that finds its lock gone (it stalled longer than the TTL
and another took over) stops at once without touching the run.
"""

from __future__ import annotations

import contextlib
import functools

import redis
from django.conf import settings
from redis.exceptions import LockError

PREFIX = "policylab:jobs"


def lock_key(run_id: int) -> str:
    return f"{PREFIX}:supervisor:run:{run_id}"


def enqueued_key(run_id: int) -> str:
    """Set while a supervise_run message for the run waits in the queue (avoids piling up copies)."""
    return f"{PREFIX}:enqueued:run:{run_id}"


def connection() -> redis.Redis:
    """A client on settings.REDIS_URL (one connection pool per URL, shared by threads)."""
    return _client(settings.REDIS_URL)


@functools.lru_cache(maxsize=8)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


class LockLost(RuntimeError):
    """This supervisor no longer owns its run."""


class SupervisorLock:
    def __init__(self, client: redis.Redis, run_id: int, ttl: float) -> None:
        self.run_id = run_id
        self._lock = client.lock(lock_key(run_id), timeout=ttl, thread_local=False)

    def acquire(self) -> bool:
        return bool(self._lock.acquire(blocking=False))

    def refresh(self) -> None:
        """Reset the TTL; raises LockLost when the key expired or belongs to someone else."""
        try:
            self._lock.reacquire()
        except LockError as error:
            raise LockLost(f"run {self.run_id}: supervisor lock lost ({error})") from error

    def release(self) -> None:
        with contextlib.suppress(LockError):  # expired or taken over: nothing of ours to release
            self._lock.release()


def is_supervised(client: redis.Redis, run_id: int) -> bool:
    return bool(client.exists(lock_key(run_id)))
