"""A cancelled run (SIGTERM: the platform's cancel is Ray's stop_job) ends with `status: cancelled` and one
clean line "cancelled": no traceback in its log events or on stderr, no "training failed: SystemExit: 15",
no native stack dump of Ray's failure-signal handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, FAST, REPO_ROOT, events, load_cfg


def test_rays_sigterm_exit_is_reported_as_cancelled_without_a_traceback(tmp_path: Path, monkeypatch, capsys) -> None:
    """Ray's driver handler turns SIGTERM into sys.exit(15) wherever the loop is: a cancel, not a failure."""
    from trainer.pipeline import runner

    def stopped(*args, **kwargs):
        sys.exit(signal.SIGTERM)  # what ray.init's SIGTERM handler does

    monkeypatch.setattr(runner, "prepare_pipeline", stopped)
    code = runner.run_training(load_cfg(tmp_path), runner.RunIdentity(run_id="c1"), backend="local",
                               log=lambda line: None)
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1] == "cancelled"
    assert "Traceback" not in err and "training failed" not in err
    assert [e["data"]["state"] for e in events(tmp_path, "status")] == ["starting", "cancelled"]
    assert events(tmp_path, "log") == []  # the traceback event is gone


def test_the_callers_sigterm_handler_is_back_after_the_run(tmp_path: Path, monkeypatch) -> None:
    from trainer.pipeline import runner

    def mine(signum, frame):  # pragma: no cover - never called
        raise AssertionError

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        monkeypatch.setattr(runner, "prepare_pipeline", lambda *a, **k: sys.exit(signal.SIGTERM))
        runner.run_training(load_cfg(tmp_path), runner.RunIdentity(run_id="c2"), backend="local", log=lambda line: None)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def start_run(tmp_path: Path, workers: str) -> subprocess.Popen[str]:
    """The demo (fast settings, many steps) as the platform starts it, its output in files."""
    args = [sys.executable, "-m", "trainer", "run", str(DEMO_GRPO), *FAST, f"output_dir={tmp_path}",
            "max_steps=5000", "eval_steps=100000", "save_steps=100000", "--workers", workers]
    return subprocess.Popen(args, cwd=REPO_ROOT, stdout=(tmp_path / "stdout").open("w"),
                            stderr=(tmp_path / "stderr").open("w"), text=True,
                            env={**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USE_RANDOM_PORTS": "1"})


def cancel_once_running(process: subprocess.Popen[str], tmp_path: Path, timeout_s: float = 240) -> int:
    """SIGTERM once the run has trained a step (as a cancel of a running run); its exit code."""
    deadline = time.monotonic() + timeout_s
    log = tmp_path / "events.jsonl"
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if log.exists() and any(json.loads(line).get("type") == "metrics"
                                    for line in log.read_text(encoding="utf-8").split("\n") if line.strip()):
                break
            time.sleep(0.5)
        assert process.poll() is None, (tmp_path / "stderr").read_text()[-3000:]
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def assert_cleanly_cancelled(tmp_path: Path) -> None:
    stderr = (tmp_path / "stderr").read_text()
    assert stderr.strip().splitlines()[-1] == "cancelled", stderr[-3000:]
    assert "Traceback" not in stderr and "training failed" not in stderr, stderr[-3000:]
    assert "SIGTERM received" not in stderr, stderr[-3000:]  # Ray's native failure-signal handler
    assert events(tmp_path, "status")[-1]["data"]["state"] == "cancelled"
    assert not [e for e in events(tmp_path, "log") if "Traceback" in "\n".join(e["data"]["lines"])]


def test_a_local_run_stopped_by_sigterm_ends_with_one_line_cancelled(tmp_path: Path) -> None:
    code = cancel_once_running(start_run(tmp_path, "local"), tmp_path)
    assert code == 1  # before: killed by the signal (-15), no terminal status at all
    assert_cleanly_cancelled(tmp_path)


@pytest.mark.slow
def test_a_ray_run_stopped_by_sigterm_ends_with_one_line_cancelled(tmp_path: Path) -> None:
    """Through a private Ray head as `--workers ray` starts it: ray.init's handlers replaced by ours."""
    code = cancel_once_running(start_run(tmp_path, "ray"), tmp_path)
    assert code == 1
    assert_cleanly_cancelled(tmp_path)
