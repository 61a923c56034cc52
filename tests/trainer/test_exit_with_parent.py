"""`python -m trainer run --exit-with-parent` stops once its parent process is gone (an orphaned Ray job
entrypoint, see trainer.cli.exit_when_orphaned)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from trainer.cli import exit_when_orphaned


def test_an_orphan_sigterms_itself_and_a_child_with_its_parent_runs_on(tmp_path) -> None:
    # parent: starts a child that arms the watch and then waits for SIGTERM, prints its pid, exits at once
    child = (
        "import signal, sys, time\n"
        "from trainer.cli import exit_when_orphaned\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(tmp_path / 'got')!r}, 'w').write('TERM'), sys.exit(0)))\n"
        "exit_when_orphaned(poll_s=0.05)\n"
        "print('armed', flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE, text=True,"
        " start_new_session=True)\n"
        "assert p.stdout.readline().strip() == 'armed'\n"
        "print(p.pid, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60,
                         cwd=os.getcwd())
    orphan = int(out.stdout.strip())
    deadline = time.monotonic() + 30
    while (tmp_path / "got").exists() is False and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert (tmp_path / "got").read_text() == "TERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan, signal.SIGKILL)


def test_the_watch_stays_quiet_while_the_parent_lives() -> None:
    thread = exit_when_orphaned(poll_s=0.01)
    time.sleep(0.1)
    assert thread.is_alive()  # still watching: this process's parent (pytest's) is alive
