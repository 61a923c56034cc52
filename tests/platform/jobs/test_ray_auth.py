"""Ray's job API is not an open door (issue 41, decision 0047): the cluster the platform starts
(scripts/services.start_ray_head, the `ray_head` fixture) requires the deployment's token on its dashboard
and job API; the platform's job client sends it; a job's driver gets the token's path, never its value."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from policylab.jobs import ray_jobs
from tests.services import wait_for


def status_of(url: str, method: str = "GET", token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def state(client, job_id: str) -> str:
    return ray_jobs.job_state(client, job_id).status


def test_a_stop_without_the_token_is_refused_and_the_platforms_client_stops(ray_head, ray_client) -> None:
    job = "pl-test-auth-stop"
    ray_jobs.submit(ray_client, job, "python -c 'import time; print(\"up\", flush=True); time.sleep(120)'", {})
    wait_for(lambda: state(ray_client, job) == "RUNNING", 60, f"{job} running")
    stop = f"{ray_head.address}/api/jobs/{job}/stop"
    assert status_of(stop, "POST") == 401  # no credential: what a run's judge_api_url probe sent
    assert status_of(stop, "POST", token="not-the-token") == 403
    assert status_of(f"{ray_head.address}/api/jobs/") == 401 and status_of(f"{ray_head.address}/api/version") == 401
    assert state(ray_client, job) == "RUNNING"
    assert ray_jobs.stop(ray_client, job) is True
    wait_for(lambda: state(ray_client, job) == "STOPPED", 60, f"{job} stopped")


def test_the_token_is_the_deployments_own_file_readable_by_its_user_only(ray_head) -> None:
    path = Path(ray_head.extra["token_path"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text().strip()) == 64
    assert ray_jobs.auth_headers() == {"Authorization": f"Bearer {path.read_text().strip()}"}


def test_a_job_driver_gets_the_tokens_path_not_its_value(ray_head, ray_client) -> None:
    """What remains visible to the trainer (the job's driver, platform code): RAY_AUTH_MODE and the token file's
    path, which Ray's own client in the driver reads to join the cluster. Never the token in the environment."""
    job = "pl-test-auth-env"
    probe = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'AUTH' in k}))"
    ray_jobs.submit(ray_client, job, f"python -c \"{probe}\"", {})
    wait_for(lambda: state(ray_client, job) in ("SUCCEEDED", "FAILED"), 60, f"{job} done")
    token = Path(ray_head.extra["token_path"]).read_text().strip()
    # Ray may report SUCCEEDED before the driver's last line reaches the job's log (seen on a loaded machine)
    log = wait_for(lambda: (text := ray_jobs.logs(ray_client, job)).strip().endswith("}") and text, 30,
                   f"{job}'s printed environment in its log")
    seen = json.loads(log.strip().splitlines()[-1])
    assert token not in log and "RAY_AUTH_TOKEN" not in seen
    assert seen.get("RAY_AUTH_MODE") == "token" and seen.get("RAY_AUTH_TOKEN_PATH") == ray_head.extra["token_path"]


def test_the_token_file_is_made_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scripts.services import ray_node_env, ray_token_path

    monkeypatch.delenv("POLICYLAB_RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "a-token-from-elsewhere")
    first = ray_token_path(tmp_path)
    token = first.read_text()
    assert ray_token_path(tmp_path).read_text() == token and first == tmp_path / "ray_auth_token"
    env = ray_node_env(first)
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(first)
    assert "RAY_AUTH_TOKEN" not in env  # only the file: the value is in no process's environment
    assert os.stat(first).st_uid == os.getuid()
