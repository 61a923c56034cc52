"""The Ray Job Submission API, reduced to what the supervisor needs.

`ray` is imported lazily: the web process imports this module (through jobs.services) and must
start without paying for Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policylab.jobs.transitions import MISSING


class RayUnavailable(RuntimeError):
    """The Ray dashboard / job API cannot be reached (transient: the supervisor keeps waiting)."""


@dataclass(frozen=True)
class JobState:
    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, or MISSING
    message: str = ""
    exit_code: int | None = None


def connect(address: str) -> Any:
    """A JobSubmissionClient for `address` (the dashboard URL, e.g. http://127.0.0.1:8265)."""
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
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
