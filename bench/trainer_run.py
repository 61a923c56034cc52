"""One run of the trainer CLI, for the benches that compare whole runs (async.py, dynamic_sampling.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_trainer(config: Path, out: Path, overrides: list[str], *, workers: str, name: str) -> dict[str, Any]:
    """`python -m trainer run config --workers workers output_dir=out *overrides`, one thread per process.

    Returns `metrics`, the run's metrics events as (step, seconds since its "running" status, values), `total`,
    the wall seconds of the whole process (start-up included), and `load`, the load average before and after.
    A failed run ends the bench with the tail of its stderr."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trainer", "run", str(config), "--workers", workers,
                           f"output_dir={out}", *overrides], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the run failed:\n{proc.stderr[-3000:]}")
    # split on "\n" only: str.splitlines() also splits at U+0085 / U+2028, which sampled text may contain
    lines = (out / "events.jsonl").read_text(encoding="utf-8").split("\n")
    events = [json.loads(line) for line in lines if line.strip()]
    t0 = next(e["time"] for e in events if e["type"] == "status" and e["data"]["state"] == "running")
    metrics = [(e["step"], e["time"] - t0, e["data"]["values"]) for e in events if e["type"] == "metrics"]
    return {"metrics": metrics, "total": time.perf_counter() - started, "load": (load_before, os.getloadavg()[0])}
