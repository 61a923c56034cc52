"""The Ray Job Submission API, reduced to what the supervisor needs.

`ray` is imported lazily: the web process may import this module (jobs.receivers pulls in the tasks) and must
start without paying for Ray. Every HTTP request has a timeout (the SDK sets none: a dashboard that
accepts a connection and never answers would hang a supervisor for ever). A job's output is followed
with `LogTail` (Ray's log tail websocket) instead of fetching the whole log again and again. Every request
carries the deployment's Ray token (`auth_headers`): the cluster the platform starts refuses any without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from policylab.jobs.transitions import MISSING

HTTP_TIMEOUT_S = 30.0


class RayUnavailable(RuntimeError):
    """The Ray dashboard / job API cannot be reached (transient: the supervisor keeps waiting)."""


@dataclass(frozen=True)
class JobState:
    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, or MISSING
    message: str = ""
    exit_code: int | None = None


def auth_headers() -> dict[str, str]:
    """`Authorization: Bearer <token>` from settings.POLICYLAB_RAY_AUTH_TOKEN_PATH, read at each connect (the
    file may be created after this process started); {} when there is no token file."""
    from django.conf import settings

    try:
        token = Path(settings.POLICYLAB_RAY_AUTH_TOKEN_PATH).read_text().strip()
    except FileNotFoundError:
        return {}
    return {"Authorization": f"Bearer {token}"} if token else {}


@functools.cache
def _client_class() -> type:
    from ray.job_submission import JobSubmissionClient

    class TimedJobSubmissionClient(JobSubmissionClient):
        """A JobSubmissionClient whose every HTTP request gives up after `http_timeout_s` seconds."""

        def __init__(self, address: str, *, http_timeout_s: float) -> None:
            self.http_timeout_s = http_timeout_s  # before the base class's first request (its version check)
            super().__init__(address, headers=auth_headers())

        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", self.http_timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return TimedJobSubmissionClient


def connect(address: str, timeout_s: float = HTTP_TIMEOUT_S) -> Any:
    """A JobSubmissionClient for `address` (the dashboard URL, e.g. http://127.0.0.1:8265) whose requests
    time out after `timeout_s` seconds (RayUnavailable, like a refused connection)."""
    try:
        return _client_class()(address, http_timeout_s=timeout_s)
    except (ConnectionError, OSError) as error:
        raise RayUnavailable(f"Ray job API at {address} is unreachable: {error}") from error
    except RuntimeError as error:  # the SDK wraps "could not connect" in RuntimeError / ConnectionError
        raise RayUnavailable(f"Ray job API at {address}: {error}") from error


def _not_found(error: RuntimeError) -> bool:
    return "status code 404" in str(error)


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    import requests

    try:
        return fn(*args, **kwargs)
    except requests.exceptions.RequestException as error:
        raise RayUnavailable(f"Ray job API: {error}") from error


def job_state(client: Any, submission_id: str) -> JobState:
    try:
        info = _call(client.get_job_info, submission_id)
    except RuntimeError as error:
        if _not_found(error):
            return JobState(MISSING, f"no Ray job {submission_id}")
        raise
    return JobState(str(info.status.value if hasattr(info.status, "value") else info.status),
                    info.message or "", info.driver_exit_code)


def submit(client: Any, submission_id: str, entrypoint: str, runtime_env: dict[str, Any],
           metadata: dict[str, str] | None = None) -> bool:
    """Submit unless a job with `submission_id` exists already. True when this call submitted it."""
    if job_state(client, submission_id).status != MISSING:
        return False
    try:
        _call(client.submit_job, entrypoint=entrypoint, submission_id=submission_id, runtime_env=runtime_env,
              metadata=metadata or {})
    except RuntimeError as error:
        if "already exists" in str(error):  # a racing submit of the same attempt won
            return False
        raise
    return True


def stop(client: Any, submission_id: str) -> bool:
    """Ask Ray to stop the job (SIGTERM, then SIGKILL after Ray's grace period). False if not running."""
    try:
        return bool(_call(client.stop_job, submission_id))
    except RuntimeError as error:
        if _not_found(error):
            return False
        raise


def logs(client: Any, submission_id: str) -> str:
    """The job driver's whole output so far ("" when Ray has none)."""
    try:
        return _call(client.get_job_logs, submission_id) or ""
    except RuntimeError as error:
        if _not_found(error):
            return ""
        raise


def split_lines(text: str, *, final: bool) -> list[str]:
    """The lines of a job's output (Ray reads the log in text mode, so every line break is a "\n"); the
    last, unterminated piece only when the output is `final`."""
    lines = text.split("\n")
    last = lines.pop()
    return [*lines, last] if final and last else lines


class LogTail:
    """Follows one job's driver output through Ray's log tail websocket (`/api/jobs/<id>/logs/tail`) in a
    daemon thread. Ray streams the log from its first line, then each line as it is written, and closes
    the socket once the job is over and every line was sent (`complete`). `take()` hands over the complete
    lines received since the previous call, numbered from the log's first line (0); `close()` stops
    following. A tail that ended otherwise (Ray unreachable, the job unknown) says why in `error`."""

    def __init__(self, address: str, submission_id: str, *, heartbeat_s: float = 30.0,
                 connect_timeout_s: float = HTTP_TIMEOUT_S) -> None:
        self.submission_id = submission_id
        self._url = f"{address.rstrip('/')}/api/jobs/{submission_id}/logs/tail"
        self._heartbeat_s, self._connect_timeout_s = heartbeat_s, connect_timeout_s
        self._mutex = threading.Lock()
        self._text = ""  # received, not yet handed over
        self._next_index = 0  # log index of the next line take() hands over
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        self.complete = False
        self.error = ""
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"log-tail-{submission_id}")
        self._thread.start()

    def take(self) -> tuple[int, list[str]]:
        """(log index of the first line, the complete lines received since the last call); once the
        stream is complete, the last unterminated line too."""
        with self._mutex:
            if self.complete:
                lines, self._text = split_lines(self._text, final=True), ""
            else:
                done, newline, self._text = self._text.rpartition("\n")
                lines = done.split("\n") if newline else []
            first = self._next_index
            self._next_index += len(lines)
        return first, lines

    def close(self) -> None:
        """Stop following (the thread ends soon after)."""
        with self._mutex:
            self._closed = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the thread has ended
                loop.call_soon_threadsafe(task.cancel)

    def _run(self) -> None:
        try:
            asyncio.run(self._follow())
        except asyncio.CancelledError:
            self.error = "closed"
        except Exception as error:  # ended otherwise than by the job's end: the supervisor falls back
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self.ended.set()

    async def _follow(self) -> None:
        import aiohttp

        with self._mutex:
            if self._closed:
                raise asyncio.CancelledError
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.ws_connect(
            self._url, heartbeat=self._heartbeat_s, headers=auth_headers()
        ) as socket:
            async for message in socket:
                if message.type == aiohttp.WSMsgType.TEXT:
                    with self._mutex:
                        self._text += message.data
                elif message.type == aiohttp.WSMsgType.ERROR:
                    raise RuntimeError(f"log tail of {self.submission_id}: {socket.exception()}")
            if socket.close_code != aiohttp.WSCloseCode.OK:
                raise RuntimeError(f"log tail of {self.submission_id} closed with code {socket.close_code}")
        with self._mutex:
            self.complete = True
