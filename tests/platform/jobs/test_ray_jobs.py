"""The Ray submission layer against a real Ray head, with trivial `python -c` entrypoints."""

from __future__ import annotations

import pytest

from policylab.jobs import ray_jobs
from tests.services import wait_for


def state_becomes(client, job_id: str, wanted: set[str], timeout: float = 60):
    return wait_for(lambda: (s := ray_jobs.job_state(client, job_id)).status in wanted and s, timeout,
                    f"{job_id} to reach {wanted}")


def test_submit_is_idempotent_per_submission_id(ray_client) -> None:
    entry = "python -c 'print(\"hello from the job\")'"
    assert ray_jobs.submit(ray_client, "pl-test-idem", entry, {}) is True
    assert ray_jobs.submit(ray_client, "pl-test-idem", entry, {}) is False  # found, not submitted twice
    assert [j.submission_id for j in ray_client.list_jobs()].count("pl-test-idem") == 1
    done = state_becomes(ray_client, "pl-test-idem", {"SUCCEEDED", "FAILED"})
    assert done.status == "SUCCEEDED" and done.exit_code == 0
    assert "hello from the job" in ray_jobs.logs(ray_client, "pl-test-idem")


def test_failure_reports_the_exit_code_and_env_vars_reach_the_job(ray_client) -> None:
    entry = "python -c 'import os, sys; print(os.environ[\"PL_PROBE\"]); sys.exit(2)'"
    ray_jobs.submit(ray_client, "pl-test-fail", entry, {"env_vars": {"PL_PROBE": "probe-value"}})
    done = state_becomes(ray_client, "pl-test-fail", {"SUCCEEDED", "FAILED"})
    assert (done.status, done.exit_code) == ("FAILED", 2)
    assert "probe-value" in ray_jobs.logs(ray_client, "pl-test-fail")


def test_stop_ends_a_running_job_as_stopped(ray_client) -> None:
    ray_jobs.submit(ray_client, "pl-test-stop", "python -c 'import time; print(\"up\", flush=True); time.sleep(120)'", {})
    state_becomes(ray_client, "pl-test-stop", {"RUNNING"})
    assert ray_jobs.stop(ray_client, "pl-test-stop") is True
    assert state_becomes(ray_client, "pl-test-stop", {"STOPPED", "FAILED", "SUCCEEDED"}).status == "STOPPED"


def test_unknown_jobs_are_missing_not_errors(ray_client) -> None:
    assert ray_jobs.job_state(ray_client, "pl-test-never-submitted").status == "MISSING"
    assert ray_jobs.stop(ray_client, "pl-test-never-submitted") is False
    assert ray_jobs.logs(ray_client, "pl-test-never-submitted") == ""


def test_unreachable_ray_is_reported_as_unavailable() -> None:
    from scripts.services import free_port

    with pytest.raises(ray_jobs.RayUnavailable, match=r"127\.0\.0\.1"):
        ray_jobs.connect(f"http://127.0.0.1:{free_port()}")
