"""A local sandbox for untrusted Python programs (the code-sandbox reward's `use_local: true`).

`run_python(code, stdin=…, limits=…)` writes the program into a fresh temporary directory and runs it
in a child interpreter (`python -I -S -B`, standard library only) that applies the layers of
trainer/rewards/sandbox_child.py, with:

- a wall-clock limit: past `timeout_s` the child's whole process group is killed (SIGKILL);
- RLIMIT_AS `memory_mb`, RLIMIT_CPU `cpu_s`, RLIMIT_FSIZE `max_output_bytes` (stdout and stderr go to
  files, so a flood stops at the cap and at most that much is read back), RLIMIT_NOFILE, no core files,
  RLIMIT_NPROC where the kernel enforces it (not for root);
- no network: a new network namespace where the kernel allows one (root, or unprivileged user
  namespaces), always also an audit hook refusing socket connects, binds, sends and name lookups;
- a clean environment (PATH, LANG and HOME=the working directory only: no inherited secrets);
- as root, the program runs as nobody when the interpreter is readable by others (`drop_user`);
- the temporary directory is removed afterwards, whatever the program did to it.

What this does not isolate (docs/decisions/0036-code-sandbox.md): it is not a security boundary
against a determined attacker. Without a mount namespace and seccomp the program shares the host's
file system and kernel; the audit hook can be bypassed by memory-corruption bugs in CPython.

Standard library only (no torch): the reward worker calls it from a thread pool.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
POLL_S = 0.01
KILLED_EXIT = -signal.SIGKILL


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program run; `cpu_s` None means ceil(timeout_s) + 1: a single-threaded program's CPU
    time stays below the wall clock, so the wall-clock kill (-9) ends it first and RLIMIT_CPU (SIGXCPU)
    only stops programs that burn CPU on several threads faster than time passes."""

    timeout_s: float = 20.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    max_output_bytes: int = 1024 * 1024
    max_processes: int = 16
    isolate_network: bool = True
    drop_user: bool = True
    audit_hook: bool = True  # False only to test the kernel layers on their own
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self) -> None:
        checks = {"timeout_s": self.timeout_s > 0, "memory_mb": self.memory_mb >= 32,
                  "cpu_s": self.cpu_s is None or self.cpu_s >= 1, "max_output_bytes": self.max_output_bytes >= 1,
                  "max_processes": self.max_processes >= 0}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{bad[0]}: {getattr(self, bad[0])!r} is out of range (timeout_s > 0, memory_mb >= 32, "
                             "cpu_s >= 1, max_output_bytes >= 1, max_processes >= 0)")

    @property
    def cpu_seconds(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


@dataclass(frozen=True)
class SandboxResult:
    """What one run did. `returncode` < 0 is the signal that ended it (-9: killed at the time limit)."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    duration_s: float
    layers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_truncated


def run_python(code: str, *, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as `__main__` in the sandbox with `stdin`; see the module docstring."""
    limits = limits or SandboxLimits()
    workdir = tempfile.mkdtemp(prefix="policylab-sandbox-")
    try:
        return _run_in(Path(workdir), code, stdin, limits)
    finally:
        remove_tree(workdir)


def _run_in(workdir: Path, code: str, stdin: str, limits: SandboxLimits) -> SandboxResult:
    drop = (limits.drop_user and os.geteuid() == 0 and world_usable(limits.python)
            and world_usable(CHILD, stat.S_IROTH))
    (workdir / "solution.py").write_text(code, encoding="utf-8")
    (workdir / "stdin.txt").write_text(stdin, encoding="utf-8")
    report_r, report_w = os.pipe()
    config = {"workdir": str(workdir), "memory_mb": limits.memory_mb, "cpu_s": limits.cpu_seconds,
              "max_output_bytes": limits.max_output_bytes, "max_processes": limits.max_processes,
              "isolate_network": limits.isolate_network, "drop_user": drop, "audit_hook": limits.audit_hook,
              "report_fd": report_w}
    (workdir / "sandbox.json").write_text(json.dumps(config), encoding="utf-8")
    if drop:
        _hand_to_nobody(workdir)
    try:
        proc, started = _spawn(workdir, limits, report_w)
    finally:
        os.close(report_w)
    timed_out = _wait(proc, started + limits.timeout_s)
    duration = time.monotonic() - started
    layers = _read_report(report_r)
    stdout, cut_out = _read_capped(workdir / "stdout.txt", limits.max_output_bytes)
    stderr, cut_err = _read_capped(workdir / "stderr.txt", limits.max_output_bytes)
    return SandboxResult(returncode=proc.returncode, stdout=stdout, stderr=stderr, timed_out=timed_out,
                         output_truncated=cut_out or cut_err, duration_s=duration, layers=layers)


def _spawn(workdir: Path, limits: SandboxLimits, report_w: int) -> tuple[subprocess.Popen[bytes], float]:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": str(workdir),
           "TMPDIR": str(workdir)}
    with (open(workdir / "stdin.txt", "rb") as stdin, open(workdir / "stdout.txt", "wb") as stdout,
          open(workdir / "stderr.txt", "wb") as stderr):
        started = time.monotonic()
        proc = subprocess.Popen(
            [limits.python, "-I", "-S", "-B", str(CHILD), str(workdir / "sandbox.json")],
            stdin=stdin, stdout=stdout, stderr=stderr, cwd=workdir, env=env, pass_fds=(report_w,),
            start_new_session=True, close_fds=True,
        )
    return proc, started


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for the child until `deadline`; then (or once it has exited) kill its whole process group.

    The child is waited for without being reaped (WNOWAIT), so its process-group id cannot be reused by
    another process before the group is killed. True if the deadline passed first."""
    timed_out = True
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            timed_out = False
            break
        time.sleep(POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return timed_out


def _read_report(fd: int) -> dict[str, str]:
    with os.fdopen(fd, "r") as report:
        text = report.read()
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def _read_capped(path: Path, cap: int) -> tuple[str, bool]:
    """At most `cap` bytes of `path` as text; True when the file reached the cap (output cut)."""
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except FileNotFoundError:
        return "", False
    return data[:cap].decode("utf-8", errors="replace"), len(data) >= cap


def _hand_to_nobody(workdir: Path) -> None:
    for path in [workdir, *workdir.iterdir()]:
        os.chown(path, NOBODY, NOBODY)


def world_usable(path: str | Path, mode: int = stat.S_IXOTH) -> bool:
    """True if others may use `path` (`mode`: execute by default) and traverse every folder above it, so
    that the child can still start and import once it is nobody (an interpreter's standard library lies
    beside it)."""
    real = Path(os.path.realpath(path))
    return bool(real.stat().st_mode & mode) and all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)


def remove_tree(path: str | Path) -> None:
    """Remove `path` even where the program took away permissions (chmod 000) inside it."""

    def make_writable(func: Any, target: str, exc: Any) -> None:
        parent = os.path.dirname(target)
        for p in (parent, target):
            with contextlib.suppress(OSError):
                os.chmod(p, stat.S_IRWXU)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, onerror=make_writable)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=make_writable)


@lru_cache(maxsize=4)
def sandbox_layers(limits: SandboxLimits | None = None) -> dict[str, str]:
    """Which isolation layers take hold on this machine (from running an empty program once; logged)."""
    layers = dict(run_python("", limits=limits or SandboxLimits(timeout_s=30)).layers)
    logger.info("code sandbox %s: isolation %s", limits, layers)
    return layers
