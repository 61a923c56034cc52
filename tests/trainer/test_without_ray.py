"""`python -m trainer validate` and `run --workers local` where the `ray` package is absent.

The GPU machine has no Ray (its wheel is too big to carry there), so the local backend and config
validation must not import it. Each test runs the CLI in a subprocess whose `sitecustomize.py` (a
directory put first on PYTHONPATH) sets ``sys.modules["ray"] = None``: `import ray` then raises
ModuleNotFoundError and `importlib.util.find_spec("ray")` answers None, as where ray is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, FAST, REPO_ROOT, events, metrics_by_step

NO_RAY = '''import sys

sys.modules["ray"] = None  # `import ray` raises ModuleNotFoundError; importlib.util.find_spec("ray") is None
'''


@pytest.fixture
def no_ray_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "no_ray_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_RAY, encoding="utf-8")
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    # one intra-op thread: a tiny model gains nothing from more on a busy 2-core machine
    return {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def python(args: list[str], env: dict[str, str], timeout: float = 120) -> Any:
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_ray_is_unimportable_in_the_subprocess(no_ray_env: dict[str, str]) -> None:
    probe = ("import importlib.util, sys; print(sys.modules.get('ray', 'absent'), importlib.util.find_spec('ray'));"
             "import ray")
    result = python(["-c", probe], no_ray_env)
    assert result.returncode != 0
    assert result.stdout.split() == ["None", "None"], result.stdout  # our sitecustomize ran; ray is not found
    assert "ModuleNotFoundError: import of ray halted" in result.stderr, result.stderr


def test_validate_without_ray(no_ray_env: dict[str, str]) -> None:
    result = python(["-m", "trainer", "validate", str(DEMO_GRPO)], no_ray_env)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_preflight_checks_the_backend_the_run_will_use(no_ray_env: dict[str, str]) -> None:
    """`validate --preflight` checked the Ray backend only: it refused every config where Ray is absent,
    though `run --workers local` runs them. `--workers local` asks preflight about that backend."""
    refused = python(["-m", "trainer", "validate", str(DEMO_GRPO), "--preflight"], no_ray_env)
    assert refused.returncode == 2 and "ray is not installed here" in refused.stderr
    local = python(["-m", "trainer", "validate", str(DEMO_GRPO), "--preflight", "--workers", "local"], no_ray_env)
    assert local.returncode == 0, local.stderr
    assert "OK" in local.stdout


def test_local_run_without_ray(no_ray_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = python(["-m", "trainer", "run", str(DEMO_GRPO), *FAST, f"output_dir={out}",
                     f"logging_dir={out / 'logs'}", "max_steps=2", "eval_steps=0", "save_steps=1000",
                     "--workers", "local", "--run-id", "no-ray"], no_ray_env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(metrics_by_step(out)) == [1, 2]
    status = events(out, "status")
    assert status[-1]["data"]["state"] == "succeeded" and status[-1]["run_id"] == "no-ray"


def test_ray_workers_without_ray_fail_with_one_clear_line(no_ray_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = python(["-m", "trainer", "run", str(DEMO_GRPO), f"output_dir={out}", "--workers", "ray"], no_ray_env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "ray[default]" in lines[0] and "--workers local" in lines[0]
    assert "Traceback" not in result.stderr
    assert [e["data"]["state"] for e in events(out, "status")] == ["failed"]  # where the config says the run lives
