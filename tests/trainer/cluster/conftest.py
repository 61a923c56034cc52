"""One local Ray instance per test session (starting one costs ~8 s)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
RAY_NUM_CPUS = 8  # logical CPUs: enough bundles and actors on a 2-core machine


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A fresh local Ray head (never a cluster someone else started), shut down at the end."""
    import ray

    if ray.is_initialized():  # another area's fixture started one in this session: share it
        yield
        return
    # Same auth mode everywhere, else a later JobSubmissionClient asks for a token (ENVIRONMENT.md).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Worker ports from the OS's ephemeral range instead of Ray's default 10002–19999.
    os.environ["RAY_USE_RANDOM_PORTS"] = "1"
    # Actors import `trainer` and the test workers from the repo whatever the cwd: the Ray
    # processes inherit this environment (a job runtime_env would bypass the prestarted workers).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    ray.init(
        address="local",
        num_cpus=RAY_NUM_CPUS,
        num_gpus=0,
        object_store_memory=256 * 1024**2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
