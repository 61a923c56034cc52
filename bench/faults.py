"""Fault table: every fault of tests/faults injected at a random step of a real run through the platform.

    python bench/faults.py [--seed N] [-k "Celery or driver"]

Runs the fault suite (tests/faults: `scripts/run_platform.py --nodes 2` on a fresh SQLite test database, a
Ray head and a second Ray node, Celery, ingest and the web server) and prints its table: fault x outcome x
points lost x points duplicated x time to recover x run time. The peer is the undisturbed run of the same
suite (row "none"): each row's run time is also given as a ratio to it (1.00x: the fault cost nothing).
`--seed` repeats a session's injection points (each row's step depends only on the seed and the fault).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="POLICYLAB_FAULT_SEED (default: a random one)")
    parser.add_argument("-k", default=None, help="pytest -k expression selecting faults (the peer row always runs)")
    parser.add_argument("--smoke", action="store_true",
                        help="collect the fault suite only: CI runs it in full (scripts/test.sh), ~9 min")
    args = parser.parse_args()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false")
    if args.seed is not None:
        env["POLICYLAB_FAULT_SEED"] = str(args.seed)
    argv = [sys.executable, "-m", "pytest", "tests/faults", "-q", "-p", "no:cacheprovider"]
    if args.k:
        argv += ["-k", f"none or ({args.k})"]
    if args.smoke:
        argv.append("--collect-only")
    return subprocess.run(argv, cwd=REPO_ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
