"""A config error or a worker crash ends the run with a clear message and `status: failed`."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, FAST, cli, events, load_cfg


def test_config_error_exits_2_with_field_and_failed_event(tmp_path: Path) -> None:
    result = cli(["run", str(DEMO_GRPO), f"output_dir={tmp_path}", "actor_train.training_args.learnin_rate=1",
                  "--run-id", "bad-config"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "actor_train.training_args.learnin_rate" in result.stderr
    assert "Traceback" not in result.stderr
    status = events(tmp_path, "status")
    assert [e["data"]["state"] for e in status] == ["failed"]
    assert status[0]["run_id"] == "bad-config" and "learnin_rate" in status[0]["data"]["message"]


def test_failure_during_setup_exits_1_with_failed_event(tmp_path: Path) -> None:
    """A valid config whose data file exists (preflight passes) but holds no rows fails at run time:
    exit 1, message, failed event. (A missing file is a preflight failure: exit 2, tests/trainer/config.)"""
    data = tmp_path / "prompts.csv"
    data.write_text("")
    result = cli(["run", str(DEMO_GRPO), *FAST, f"output_dir={tmp_path}", "~actor_train.data_args.synthetic",
                  f"actor_train.data_args.file_name={data}", "--workers", "local"],
                 env={"POLICYLAB_RUN_ID": "missing-data", "POLICYLAB_ATTEMPT": "3"}, timeout=180)
    assert result.returncode == 1, result.stderr
    assert "training failed" in result.stderr and "no usable prompts" in result.stderr
    status = events(tmp_path, "status")
    assert [e["data"]["state"] for e in status] == ["starting", "failed"]
    assert status[-1]["attempt"] == 3 and status[-1]["run_id"] == "missing-data"


def _worker_pids() -> list[int]:
    """Ray actor processes of OUR local cluster: descendants of this test process only."""
    import psutil

    pids = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "WorkerHost" in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


@pytest.mark.usefixtures("ray_cluster")
def test_worker_crash_mid_run_fails_fast(tmp_path: Path) -> None:
    from trainer.pipeline.runner import RunIdentity, run_training

    cfg = load_cfg(tmp_path, "max_steps=10000", "eval_steps=0", "save_steps=100000", "rpc_timeout=600")
    result: dict[str, int] = {}
    thread = threading.Thread(
        target=lambda: result.update(rc=run_training(cfg, RunIdentity("crash"), backend="ray", log=lambda s: None)),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # wait until training is under way
        if (tmp_path / "events.jsonl").exists() and any(e["step"] >= 1 for e in events(tmp_path, "metrics")):
            break
        time.sleep(0.5)
    else:
        pytest.fail("the run never reached step 1")
    pids = _worker_pids()
    assert pids, "no Ray worker processes found"
    crashed_at = time.monotonic()
    os.kill(pids[0], signal.SIGKILL)
    thread.join(timeout=120)
    assert not thread.is_alive(), "run did not end after a worker died (hang)"
    assert result["rc"] == 1
    assert time.monotonic() - crashed_at < 120
    status = events(tmp_path, "status")[-1]
    assert status["data"]["state"] == "failed"
    assert "failed" in status["data"]["message"] and "role" in status["data"]["message"]
    logs = [json.dumps(e["data"]) for e in events(tmp_path, "log")]
    assert any("WorkerGroupError" in line for line in logs)
