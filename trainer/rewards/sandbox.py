"""A local sandbox for untrusted Python programs (the code-sandbox reward's `use_local: true`), built on
bubblewrap (docs/decisions/0046-bubblewrap-sandbox.md).

`run_python(code, stdin=…, limits=…)` runs `code` under `bwrap` in new user, pid, network, mount, ipc, uts
(and cgroup) namespaces, with:

- a file system of its own: only the shared libraries (/usr/lib*, /lib*) and the interpreter's prefix,
  read-only (the interpreter's own site-packages hidden under an empty tmpfs), a fresh /proc of its own
  pid namespace, a minimal /dev, and a private tmpfs of `disk_mb` as the work folder (/sandbox). No /etc,
  no home, no checkout, no virtualenv;
- uid and gid 65534 with no supplementary groups and no capabilities (no_new_privs set by bwrap). As root,
  the user namespace maps 65534 to the host's 65534 (not to root, as bwrap's own mapping would: a root uid
  would exempt the program from RLIMIT_NPROC); otherwise bwrap maps it to the caller's uid;
- a network namespace with only a loopback interface: no host port or address is reachable;
- rlimits set inside (sandbox_child.py): RLIMIT_AS `memory_mb`, RLIMIT_CPU, RLIMIT_FSIZE `max_output_bytes`
  (stdout and stderr are host files outside the sandbox, so a flood stops at the cap), RLIMIT_NOFILE, no
  core files, and RLIMIT_NPROC = the sandbox's own tasks + `max_processes` (a fresh user namespace per run,
  so the count is this run's processes only);
- a wall-clock limit: past `timeout_s` bwrap's process group is killed, and with it, through
  --die-with-parent and the pid namespace, every process of the run;
- a clean environment (PATH, LANG, LC_ALL, HOME=TMPDIR=the work folder);
- the audit hook of sandbox_child.py as a second layer.

Where bwrap is missing or cannot create namespaces, `run_python` raises `SandboxUnavailable`: there is no
weaker mode to fall back to. Standard library only (no torch): the reward worker calls it from a thread pool.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from trainer.config.bubblewrap import INSTALL_HINT, bubblewrap_problem, bwrap_path

logger = logging.getLogger(__name__)
CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
WORK = "/sandbox"  # the work folder inside the sandbox (a private tmpfs)
CHILD_IN_SANDBOX = "/.policylab/sandbox_child.py"
POLL_S = 0.01
SIGNAL_BASE = 128
SYSTEM_LIBS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32", "/libx32")
NAMESPACES = ("user", "pid", "net", "mnt", "ipc", "uts", "cgroup")


class SandboxUnavailable(RuntimeError):
    """The local sandbox cannot run here (no bubblewrap, or no namespaces); never a reason to run unsandboxed."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program run; `cpu_s` None means ceil(timeout_s) + 1: a single-threaded program's CPU
    time stays below the wall clock, so the wall-clock kill (-9) ends it first and RLIMIT_CPU (SIGXCPU)
    only stops programs that burn CPU on several threads faster than time passes. `disk_mb` bounds the
    work folder (a tmpfs, so it is memory too)."""

    timeout_s: float = 20.0
    memory_mb: int = 1024
    cpu_s: int | None = None
    max_output_bytes: int = 1024 * 1024
    max_processes: int = 16
    disk_mb: int = 64
    isolate_network: bool = True  # False only to test the audit hook's network refusal on its own
    audit_hook: bool = True  # False only to test the kernel layers on their own
    python: str = field(default_factory=lambda: sys.executable)

    def __post_init__(self) -> None:
        checks = {"timeout_s": self.timeout_s > 0, "memory_mb": self.memory_mb >= 32,
                  "cpu_s": self.cpu_s is None or self.cpu_s >= 1, "max_output_bytes": self.max_output_bytes >= 1,
                  "max_processes": self.max_processes >= 0, "disk_mb": self.disk_mb >= 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{bad[0]}: {getattr(self, bad[0])!r} is out of range (timeout_s > 0, memory_mb >= 32, "
                             "cpu_s >= 1, max_output_bytes >= 1, max_processes >= 0, disk_mb >= 1)")

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


# -- the interpreter and what of the host the sandbox sees ---------------------------------------
@dataclass(frozen=True)
class Interpreter:
    executable: str  # the real file (a virtualenv's python resolved: the venv itself is not bound)
    prefixes: tuple[str, ...]
    site_dirs: tuple[str, ...]  # the interpreter's own site-packages, hidden in the sandbox


@lru_cache(maxsize=8)
def interpreter(python: str) -> Interpreter:
    """Where `python`'s real executable, standard library and site-packages are (asked once per path)."""
    real = os.path.realpath(python)
    probe = ("import json, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps([sys.base_prefix, "
             "sys.base_exec_prefix, p['purelib'], p['platlib']]))")
    try:
        done = subprocess.run([real, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=30, check=True)
        prefix, exec_prefix, purelib, platlib = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxUnavailable(f"python: {python!r} is not a Python interpreter this sandbox can run ({exc})") from exc
    return Interpreter(real, tuple(dict.fromkeys(os.path.realpath(p) for p in (prefix, exec_prefix))),
                       tuple(dict.fromkeys(os.path.realpath(p) for p in (purelib, platlib))))


def under(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def read_only_binds(interp: Interpreter) -> list[str]:
    """The host paths bound read-only: the shared libraries and the interpreter's prefix (its files and
    standard library). A prefix of /usr is covered by /usr/lib plus the executable itself."""
    binds = [p for p in SYSTEM_LIBS if os.path.isdir(p) and not os.path.islink(p)]
    binds += [p for p in interp.prefixes if p != "/usr" and not under(p, binds)]
    if not under(interp.executable, binds):
        binds.append(interp.executable)
    return binds


def filesystem_args(interp: Interpreter, limits: SandboxLimits) -> list[str]:
    """bwrap's file-system arguments (the parents bwrap creates for a deep bind get mode 0755, not the
    0700 of a private home, so that uid 65534 can walk to the interpreter)."""
    args: list[str] = []
    binds = read_only_binds(interp)
    made: set[str] = set()
    for path in binds:
        for parent in reversed(Path(path).parents):
            text = str(parent)
            if text != "/" and text not in made and not under(text, binds):
                args += ["--perms", "0755", "--dir", text]
                made.add(text)
        args += ["--ro-bind", path, path]
    for link in SYSTEM_LIBS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
    for site in interp.site_dirs:
        if os.path.isdir(site) and under(site, binds):
            args += ["--perms", "0555", "--tmpfs", site]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "01777", "--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", WORK, "--chdir", WORK]
    return args


# -- running one program -------------------------------------------------------------------------
def run_python(code: str, *, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as `__main__` in the sandbox with `stdin`; see the module docstring."""
    limits = limits or SandboxLimits()
    problem = bubblewrap_problem()
    if problem is not None:
        raise SandboxUnavailable(f"the local code sandbox needs bubblewrap, and {problem}; {INSTALL_HINT}")
    host_dir = Path(tempfile.mkdtemp(prefix="policylab-sandbox-"))  # stdin/stdout/stderr: never inside
    try:
        return _run_in(host_dir, code, stdin, limits)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


@dataclass(frozen=True)
class Channels:
    """The file descriptors bwrap and the child receive: the child's report pipe, the program and the child's
    source (copied into the sandbox), and, as root, the user-namespace handshake (-1 otherwise)."""

    report_w: int
    solution: int
    child: int
    info_w: int = -1
    block_r: int = -1

    @property
    def passed(self) -> tuple[int, ...]:
        return tuple(fd for fd in (self.report_w, self.solution, self.child, self.info_w, self.block_r) if fd >= 0)


def bwrap_command(interp: Interpreter, limits: SandboxLimits, channels: Channels, *, as_root: bool) -> list[str]:
    """The whole bwrap command line of one run."""
    config = {"workdir": WORK, "memory_mb": limits.memory_mb, "cpu_s": limits.cpu_seconds,
              "max_output_bytes": limits.max_output_bytes, "max_processes": limits.max_processes,
              "drop_user": as_root, "audit_hook": limits.audit_hook, "report_fd": channels.report_w}
    command = [bwrap_path() or "bwrap", "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
               "--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "LC_ALL", "C.UTF-8",
               "--setenv", "HOME", WORK, "--setenv", "TMPDIR", WORK]
    if as_root:
        # we write the user namespace's maps ourselves (65534 -> 65534, 0 -> 0 for the setup only); the
        # child keeps CAP_SETUID/CAP_SETGID just long enough to become 65534, which drops every capability
        command += ["--userns-block-fd", str(channels.block_r), "--info-fd", str(channels.info_w),
                    "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        command += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    if not limits.isolate_network:
        command.append("--share-net")
    return [*command, *filesystem_args(interp, limits),
            "--perms", "0444", "--file", str(channels.solution), f"{WORK}/solution.py",
            "--ro-bind-data", str(channels.child), CHILD_IN_SANDBOX,
            "--", interp.executable, "-I", "-S", "-B", CHILD_IN_SANDBOX, json.dumps(config)]


def _run_in(host_dir: Path, code: str, stdin: str, limits: SandboxLimits) -> SandboxResult:
    interp = interpreter(limits.python)
    as_root = os.geteuid() == 0
    (host_dir / "solution.py").write_text(code, encoding="utf-8")
    (host_dir / "stdin.txt").write_text(stdin, encoding="utf-8")
    with contextlib.ExitStack() as stack:
        fds = _Fds(stack)
        report_r, report_w = fds.pipe()
        info_r, info_w = fds.pipe() if as_root else (-1, -1)
        block_r, block_w = fds.pipe() if as_root else (-1, -1)
        channels = Channels(report_w=report_w, solution=fds.open(host_dir / "solution.py"), child=fds.open(CHILD),
                            info_w=info_w, block_r=block_r)
        proc, started = _spawn(host_dir, bwrap_command(interp, limits, channels, as_root=as_root), channels.passed)
        for fd in channels.passed:
            fds.close(fd)
        if as_root:
            _map_nobody(proc, fds.take(info_r), fds.take(block_w))
        timed_out = _wait(proc, started + limits.timeout_s)
        duration = time.monotonic() - started
        facts = _read_report(fds.take(report_r))
    stdout, cut_out = _read_capped(host_dir / "stdout.txt", limits.max_output_bytes)
    stderr, cut_err = _read_capped(host_dir / "stderr.txt", limits.max_output_bytes)
    if not facts and not timed_out:
        raise SandboxUnavailable(f"the code sandbox did not start (exit status {proc.returncode}): "
                                 f"{stderr.strip()[-500:] or 'no message'}")
    return SandboxResult(returncode=exit_status(proc.returncode), stdout=stdout, stderr=stderr, timed_out=timed_out,
                         output_truncated=cut_out or cut_err, duration_s=duration,
                         layers=describe_layers(facts, limits, interp, as_root) if facts else {})


def exit_status(bwrap_status: int) -> int:
    """The program's exit status as Popen gives it (-N: ended by signal N); bwrap reports a program's signal
    as 128 + N, as a shell does, while our own kill at the time limit ends bwrap itself (-9)."""
    return -(bwrap_status - SIGNAL_BASE) if SIGNAL_BASE < bwrap_status <= SIGNAL_BASE + 64 else bwrap_status


class _Fds:
    """File descriptors of one run, closed when the run ends whatever happens."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.open_fds: set[int] = set()
        stack.callback(self._close_all)

    def pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self.open_fds |= {r, w}
        return r, w

    def open(self, path: Path) -> int:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.open_fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.open_fds.discard(fd)
        os.close(fd)

    def take(self, fd: int) -> int:
        """Hand `fd` over to a caller that closes it."""
        self.open_fds.discard(fd)
        return fd

    def _close_all(self) -> None:
        for fd in self.open_fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _spawn(host_dir: Path, command: list[str], pass_fds: tuple[int, ...]) -> tuple[subprocess.Popen[bytes], float]:
    with (open(host_dir / "stdin.txt", "rb") as stdin, open(host_dir / "stdout.txt", "wb") as stdout,
          open(host_dir / "stderr.txt", "wb") as stderr):
        started = time.monotonic()
        proc = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, cwd="/", env={"PATH": "/usr/bin:/bin"},
                                pass_fds=pass_fds, start_new_session=True, close_fds=True)
    return proc, started


def _map_nobody(proc: subprocess.Popen[bytes], info_r: int, block_w: int) -> None:
    """Write the sandbox's user-namespace maps (bwrap waits on --userns-block-fd until we have): uid/gid 0
    for bwrap's setup, 65534 for the program, each to the same host id. Nothing else of the host is mapped."""
    try:
        with os.fdopen(info_r, "rb") as info:
            text = info.read()
        if not text:
            return  # bwrap failed before creating the namespaces; its stderr says why
        pid = int(json.loads(text)["child-pid"])
        for name in ("uid_map", "gid_map"):
            fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
            try:
                os.write(fd, f"0 0 1\n{NOBODY} {NOBODY} 1\n".encode())
            finally:
                os.close(fd)
    except (OSError, ValueError, KeyError) as exc:
        logger.warning("code sandbox: could not map the user namespace of bwrap %s: %s", proc.pid, exc)
    finally:
        with contextlib.suppress(OSError):
            os.write(block_w, b"1")
        os.close(block_w)


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for bwrap until `deadline`; then (or once it has exited) kill its whole process group.

    The sandboxed processes live in bwrap's pid namespace and die with it (--die-with-parent; a pid
    namespace ends with its init). bwrap is waited for without being reaped (WNOWAIT), so its process-group
    id cannot be reused by another process before the group is killed. True if the deadline passed first."""
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


def _read_report(fd: int) -> dict[str, object]:
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


# -- what took hold ------------------------------------------------------------------------------
def describe_layers(facts: dict[str, object], limits: SandboxLimits, interp: Interpreter,
                    as_root: bool) -> dict[str, str]:
    """The isolation in force, from what the child measured inside (its ids, capabilities, namespaces) compared
    with this process's own namespaces."""
    ours = {name: os.readlink(f"/proc/self/ns/{name}") for name in NAMESPACES if os.path.exists(f"/proc/self/ns/{name}")}
    theirs = facts.get("namespaces")
    theirs = theirs if isinstance(theirs, dict) else {}
    new = [n for n in ours if theirs.get(n) and theirs[n] != ours[n]]
    shared = [n for n in ours if n not in new]
    host_uid = NOBODY if as_root else os.getuid()
    caps = facts.get("capabilities")
    return {
        "isolation": "bubblewrap",
        "namespaces": f"new: {', '.join(new)}" + (f"; shared with the host: {', '.join(shared)}" if shared else ""),
        "user": f"uid {facts.get('uid')} gid {facts.get('gid')} groups {facts.get('groups')} (host uid {host_uid})",
        "capabilities": "none" if caps == "0000000000000000" else f"effective {caps}",
        "network": ("namespace (loopback only)" if "net" in new else "shared with the host (asked)"),
        "filesystem": (f"read-only: {', '.join(read_only_binds(interp))}; own /proc and minimal /dev; work folder "
                       f"{WORK}: tmpfs of {limits.disk_mb} MiB"),
        "processes": str(facts.get("processes")),
        "audit_hook": "on" if limits.audit_hook else "off (asked)",
    }


@lru_cache(maxsize=4)
def sandbox_layers(limits: SandboxLimits | None = None) -> dict[str, str]:
    """Which isolation layers take hold on this machine (from running an empty program once; logged).
    Raises SandboxUnavailable where the sandbox cannot run."""
    layers = dict(run_python("", limits=limits or SandboxLimits(timeout_s=30)).layers)
    logger.info("code sandbox %s: isolation %s", limits, layers)
    return layers
