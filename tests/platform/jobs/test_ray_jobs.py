"""The Ray submission layer against a real Ray head, with trivial `python -c` entrypoints."""

from __future__ import annotations

import shlex

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


class SilentDashboard:
    """An HTTP server that answers the version check (when asked to) and then never answers anything
    else: what a wedged dashboard looks like to the job client."""

    def __init__(self, answer_version: bool) -> None:
        import http.server
        import threading

        release = self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if answer_version and self.path == "/api/version":
                    body = b'{"version": "3", "ray_version": "2.60.0", "ray_commit": "x"}'
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                release.wait(120)  # hold the request open, answer nothing

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_dashboard_that_never_answers_is_unavailable_after_the_timeout() -> None:
    import time

    for answer_version in (False, True):
        dashboard = SilentDashboard(answer_version)
        try:
            started = time.monotonic()
            with pytest.raises(ray_jobs.RayUnavailable):
                client = ray_jobs.connect(dashboard.address, timeout_s=1.0)  # the version check hangs ...
                ray_jobs.job_state(client, "pl-test-wedged")  # ... or, past it, the job API does
            assert time.monotonic() - started < 20  # the 1 s timeout, not the SDK's endless wait
        finally:
            dashboard.close()


def test_a_log_tail_follows_the_output_as_it_is_written_and_ends_with_the_job(ray_client, ray_head) -> None:
    script = ("import sys, time\n"
              "for i in range(3):\n"
              "    print(f'line {i}', flush=True)\n"
              "    time.sleep(3)\n"
              "sys.stdout.write('no newline at the end'); sys.stdout.flush()\n")
    ray_jobs.submit(ray_client, "pl-test-tail", f"python -c {shlex.quote(script)}", {})
    tail = ray_jobs.LogTail(ray_head.address, "pl-test-tail")
    received: list[tuple[int, list[str]]] = []

    def line_1_arrived() -> bool:
        received.append(tail.take())
        return any("line 1" in lines for _, lines in received)

    wait_for(line_1_arrived, 60, "'line 1' through the tail")
    assert ray_jobs.job_state(ray_client, "pl-test-tail").status == "RUNNING"  # live, not after the job
    assert tail.ended.wait(60) and tail.complete, tail.error
    received.append(tail.take())
    numbered = [(first + i, line) for first, lines in received for i, line in enumerate(lines)]
    assert [n for n, _ in numbered] == list(range(len(numbered)))  # each line once, in order
    assert [line for _, line in numbered][-4:] == ["line 0", "line 1", "line 2", "no newline at the end"]
    assert [line for _, line in numbered] == ray_jobs.split_lines(ray_jobs.logs(ray_client, "pl-test-tail"), final=True)


def test_a_log_tail_of_an_unknown_job_ends_with_an_error(ray_head) -> None:
    tail = ray_jobs.LogTail(ray_head.address, "pl-test-never-submitted")
    assert tail.ended.wait(30) and not tail.complete
    assert tail.error and tail.take() == (0, [])
