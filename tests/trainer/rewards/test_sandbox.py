"""The local code sandbox (trainer/rewards/sandbox.py, bubblewrap): network refused, time limit kills, memory
capped, output bounded, no inherited secrets, nothing left behind, its layers reported (issue 36; docs/decisions/0036,
0046). The escapes of issue 41 are tests/trainer/rewards/test_sandbox_escapes.py.

Each limit is checked by what the program could do without it: a server on the host that must see no
connection, a loop that would never end, an allocation the machine could serve, a flood that would fill
the disk, an environment variable of the parent's, a file outside the working directory.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.config.bubblewrap import bubblewrap_problem
from trainer.rewards.sandbox import WORK, SandboxLimits, run_python, sandbox_layers

pytestmark = pytest.mark.skipif(bubblewrap_problem() is not None, reason=f"no bubblewrap: {bubblewrap_problem()}")
FAST = SandboxLimits(timeout_s=5.0)


@pytest.fixture
def listening_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on 127.0.0.1 recording every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(str(peer))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


CONNECT = """
import socket
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", {port}))
    print("connected")
except Exception as exc:
    print("refused:", type(exc).__name__, exc)
"""


@pytest.mark.parametrize(("isolate_network", "audit_hook"), [
    pytest.param(True, True, id="both layers"),
    pytest.param(True, False, id="network namespace alone"),
    pytest.param(False, True, id="audit hook alone"),
])
def test_network_is_refused(listening_server: tuple[int, list[str]], isolate_network: bool,
                            audit_hook: bool) -> None:
    port, accepted = listening_server
    # the same program outside the sandbox does connect: the server and the check are live
    probe = socket.create_connection(("127.0.0.1", port), timeout=2)
    probe.close()
    deadline = time.monotonic() + 2
    while not accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(accepted) == 1

    limits = SandboxLimits(timeout_s=5.0, isolate_network=isolate_network, audit_hook=audit_hook)
    result = run_python(CONNECT.format(port=port), limits=limits)
    time.sleep(0.3)
    assert "connected" not in result.stdout.replace("refused", "")
    assert result.stdout.startswith("refused:"), (result.stdout, result.stderr)
    assert len(accepted) == 1, "the sandboxed program reached the server"


def test_name_lookups_are_refused() -> None:
    result = run_python("import socket\nsocket.getaddrinfo('localhost', 80)\nprint('resolved')", limits=FAST)
    assert result.returncode != 0 and "resolved" not in result.stdout
    assert "socket.getaddrinfo is not allowed" in result.stderr


def test_a_program_past_its_time_limit_is_killed() -> None:
    started = time.monotonic()
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(timeout_s=1.0))
    elapsed = time.monotonic() - started
    assert result.timed_out and result.returncode == -9 and not result.ok
    assert 1.0 <= elapsed < 2.5, elapsed


def test_a_sleeping_program_is_killed_at_the_wall_clock_limit() -> None:
    """Sleeping uses no CPU time: only the wall-clock limit ends it."""
    started = time.monotonic()
    result = run_python("import time\ntime.sleep(60)\nprint('woke')", limits=SandboxLimits(timeout_s=1.0))
    assert result.timed_out and "woke" not in result.stdout
    assert time.monotonic() - started < 2.5


def test_cpu_time_is_limited_below_the_wall_clock() -> None:
    result = run_python("while True:\n    pass\n", limits=SandboxLimits(timeout_s=30.0, cpu_s=1))
    assert not result.timed_out and result.returncode == -24  # SIGXCPU, long before 30 s
    assert result.duration_s < 10


def test_memory_is_capped() -> None:
    code = "data = bytearray(2 * 1024**3)\nprint('allocated', len(data))"
    result = run_python(code, limits=SandboxLimits(timeout_s=10.0, memory_mb=512))
    assert result.returncode == 1 and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr
    # below the cap the same kind of allocation works
    small = run_python("data = bytearray(64 * 1024**2)\nprint('allocated', len(data))",
                       limits=SandboxLimits(timeout_s=10.0, memory_mb=512))
    assert small.ok and small.stdout.strip() == f"allocated {64 * 1024**2}"


def test_output_flood_is_bounded() -> None:
    started = time.monotonic()
    result = run_python("while True:\n    print('x' * 4096)\n",
                        limits=SandboxLimits(timeout_s=10.0, max_output_bytes=64 * 1024))
    assert result.output_truncated and not result.ok and not result.timed_out
    assert len(result.stdout) <= 64 * 1024
    assert time.monotonic() - started < 5


def test_parent_secrets_are_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYLAB_TEST_SECRET", "s3cr3t-value")
    result = run_python("import os\nprint(sorted(os.environ))\nprint(dict(os.environ))", limits=FAST)
    assert result.ok, result.stderr
    assert "s3cr3t-value" not in result.stdout and "POLICYLAB_TEST_SECRET" not in result.stdout
    assert result.stdout.splitlines()[0] == "['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR']"


def test_nothing_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work folder is a tmpfs of the run's mount namespace (gone with it, chmod 000 inside or not); the
    host folder of stdin/stdout/stderr is removed, also after a timeout."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = ("import os\nos.mkdir('locked')\nopen('locked/f', 'w').write('x')\nos.chmod('locked', 0)\n"
            "open('big', 'w').write('y' * 1000)\nprint(os.getcwd())")
    result = run_python(code, limits=FAST)
    assert result.ok, result.stderr
    assert result.stdout.strip() == WORK
    assert list(tmp_path.iterdir()) == []
    timed_out = run_python("open('f', 'w').write('x')\nwhile True:\n    pass", limits=SandboxLimits(timeout_s=1.0))
    assert timed_out.timed_out and list(tmp_path.iterdir()) == []


def test_files_outside_the_working_directory_are_out_of_reach(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    result = run_python(f"open({str(target)!r}, 'w').write('written')", limits=FAST)
    assert result.returncode == 1 and not target.exists()
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    result = run_python(f"print(open({str(secret)!r}).read())", limits=FAST)
    assert "do not read" not in result.stdout and "not allowed" in result.stderr
    result = run_python(f"import shutil\nshutil.rmtree({str(tmp_path)!r})", limits=FAST)
    assert result.returncode == 1 and secret.exists()


@pytest.mark.parametrize("code", [
    "import os\nos.fork()",
    "import subprocess\nsubprocess.run(['true'])",
    "import os\nos.system('true')",
    "import ctypes",
    "import os, signal\nos.kill(os.getppid(), signal.SIGTERM)",
])
def test_processes_signals_and_native_calls_are_refused(code: str) -> None:
    result = run_python(code, limits=FAST)
    assert result.returncode == 1 and "not allowed" in result.stderr, result.stderr


def test_fork_bomb_ends() -> None:
    """Forking is refused (audit hook); should a process slip through, the whole group dies at the limit."""
    started = time.monotonic()
    result = run_python("import os\nwhile True:\n    try:\n        os.fork()\n    except PermissionError:\n"
                        "        pass\n", limits=SandboxLimits(timeout_s=1.0))
    assert result.timed_out and time.monotonic() - started < 2.5


def test_layers_are_reported() -> None:
    """What the child measured inside, compared with this process: the report cannot claim a layer that is
    not there (the network namespace shared on request shows as shared)."""
    layers = run_python("", limits=FAST).layers
    assert layers["isolation"] == "bubblewrap" and layers["audit_hook"] == "on"
    assert layers["namespaces"].startswith("new: user, pid, net, mnt, ipc, uts"), layers
    assert layers["user"].startswith("uid 65534 gid 65534 groups []") and layers["capabilities"] == "none"
    assert layers["network"] == "namespace (loopback only)"
    assert layers["processes"] == "limit 17 tasks of uid 65534"  # itself + max_processes 16
    assert f"work folder {WORK}: tmpfs of 64 MiB" in layers["filesystem"]
    shared = run_python("", limits=SandboxLimits(timeout_s=5.0, isolate_network=False, audit_hook=False)).layers
    assert "shared with the host: net" in shared["namespaces"] and shared["network"] == "shared with the host (asked)"
    assert shared["audit_hook"] == "off (asked)"
    assert sandbox_layers(FAST) == layers


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match=r"^timeout_s: 0 is out of range"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match=r"^memory_mb: 8 is out of range"):
        SandboxLimits(memory_mb=8)
    with pytest.raises(ValueError, match=r"^disk_mb: 0 is out of range"):
        SandboxLimits(disk_mb=0)


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no system interpreter")
def test_a_system_interpreter_runs_with_its_standard_library_only(tmp_path: Path) -> None:
    """An interpreter of prefix /usr: bound through /usr/lib and its executable; nothing else of /usr."""
    code = ("import os, json, sqlite3, ssl\nprint(os.getuid())\nprint(sorted(os.listdir('/usr')))\n"
            "print(os.path.exists('/usr/bin/cc'), os.path.exists('/usr/local'))")
    result = run_python(code, limits=SandboxLimits(timeout_s=10.0, python=SYSTEM_PYTHON, audit_hook=False))
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["65534", str(sorted({"bin", "lib", "lib64"} & set(os.listdir("/usr")))),
                                          "False False"]
