"""`python -m trainer run --exit-with-parent` stops once its parent process is gone (an orphaned Ray job
entrypoint, see trainer.cli.exit_when_orphaned), and not while its parent lives."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def watched_child(tmp_path: Path, *, parent_exits: bool, child_runs_s: float, arm_after_s: float = 0.0) -> str:
    """A parent process starts a child that arms the watch (polling every 50 ms), records a SIGTERM in a file
    and otherwise writes "done" after `child_runs_s`; the parent exits at once or waits for the child. The
    child arms the watch `arm_after_s` after it starts (its parent may be gone by then). Returns what it wrote."""
    record = tmp_path / "record"
    # the parent reads the child's "armed" only when the child arms at once: a late child's parent is gone
    handshake = ["started"] if arm_after_s else ["started", "armed"]
    announce = "" if arm_after_s else "print('armed', flush=True)"
    child = (
        "import signal, sys, time\n"
        "from trainer.cli import exit_when_orphaned\n"
        "print('started', flush=True)\n"
        f"time.sleep({arm_after_s})\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(record)!r}, 'w').write('TERM'), sys.exit(0)))\n"
        "exit_when_orphaned(poll_s=0.05)\n"
        f"{announce}\n"
        f"time.sleep({child_runs_s})\n"
        f"open({str(record)!r}, 'w').write('done')\n"
    )
    parent = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE, text=True,"
        " start_new_session=True)\n"
        f"for line in {handshake!r}:\n"
        "    assert p.stdout.readline().strip() == line\n"
        "print(p.pid, flush=True)\n"
        f"{'' if parent_exits else 'p.wait()'}\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    child_pid = int(out.stdout.strip())
    try:
        deadline = time.monotonic() + 30
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return record.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child_pid, signal.SIGKILL)


def test_an_orphan_sigterms_itself(tmp_path: Path) -> None:
    assert watched_child(tmp_path, parent_exits=True, child_runs_s=60) == "TERM"


def test_a_child_whose_parent_lives_runs_to_its_end(tmp_path: Path) -> None:
    assert watched_child(tmp_path, parent_exits=False, child_runs_s=1) == "done"


def test_a_process_orphaned_before_it_armed_the_watch_stops_too(tmp_path: Path) -> None:
    # the Ray job stopped while the interpreter was still starting: the parent is init by the time of the watch
    assert watched_child(tmp_path, parent_exits=True, child_runs_s=60, arm_after_s=1.0) == "TERM"
