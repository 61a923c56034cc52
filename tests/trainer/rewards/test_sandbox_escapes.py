"""The escapes of issue 41's security probe, each tried against the local code sandbox (bubblewrap,
docs/decisions/0046-bubblewrap-sandbox.md): every one of them worked against the audit-hook sandbox.

Each program tries the escape and prints what it reached; the test asserts that nothing outside the sandbox
was reached. Most run twice: with the audit hook (the default) and with it off, so that the kernel layers
(namespaces, uid 65534, no capabilities, rlimits) are shown to hold on their own.
"""

from __future__ import annotations

import ast
import base64
import os
import shutil
import socket
import subprocess
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.config.config_testing import changed
from trainer.config import validate_config
from trainer.config.bubblewrap import bubblewrap_problem
from trainer.rewards.registry import build_reward
from trainer.rewards.sandbox import NOBODY, SandboxLimits, SandboxUnavailable, run_python

pytestmark = pytest.mark.skipif(bubblewrap_problem() is not None, reason=f"no bubblewrap: {bubblewrap_problem()}")

HOOK = pytest.mark.parametrize("audit_hook", [pytest.param(True, id="hook on"), pytest.param(False, id="kernel layers alone")])
SECRET = "policylab-secret-7f3a9c"


def limits(audit_hook: bool = True, **kw: object) -> SandboxLimits:
    return SandboxLimits(timeout_s=10.0, audit_hook=audit_hook, **kw)  # type: ignore[arg-type]


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    """A folder outside the sandbox holding a secret file (mode 0644: only isolation keeps it out of reach)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret_key").write_text(SECRET)
    (folder / f"listed-{SECRET}").write_text("x")
    return folder


# The probe's dir_fd read: the hook resolved the relative path against the (deep) working directory, the
# kernel against dir_fd (the work folder itself), ten levels higher: the root.
DIR_FD_READ = """
import os
os.makedirs("a/b/c/d/e/f/g/h/i/j", exist_ok=True)
top = os.open(".", os.O_RDONLY)
os.chdir("a/b/c/d/e/f/g/h/i/j")
try:
    fd = os.open("../" * 10 + {target!r}.lstrip("/"), os.O_RDONLY, dir_fd=top)
    print("read:", os.read(fd, 200).decode())
except OSError as exc:
    print("refused:", type(exc).__name__)
"""


@HOOK
def test_a_dir_fd_relative_open_does_not_reach_a_file_outside(secret_dir: Path, audit_hook: bool) -> None:
    result = run_python(DIR_FD_READ.format(target=str(secret_dir / "secret_key")), limits=limits(audit_hook))
    assert SECRET not in result.stdout, result.stdout
    assert "refused: FileNotFoundError" in result.stdout, (result.stdout, result.stderr)


@HOOK
def test_listing_a_folder_outside_shows_nothing(secret_dir: Path, audit_hook: bool) -> None:
    code = f"import os\ntry:\n    print(os.listdir({str(secret_dir)!r}))\nexcept OSError as exc:\n    print('refused:', exc)"
    result = run_python(code, limits=limits(audit_hook))
    assert SECRET not in result.stdout + result.stderr
    assert "refused:" in result.stdout or "listing" in result.stderr, (result.stdout, result.stderr)


@HOOK
def test_the_parents_environment_and_the_hosts_files_are_out_of_reach(audit_hook: bool) -> None:
    """/proc is the sandbox's own: the trainer's pid, its environ, /etc and the home are not there."""
    host_pid = os.getpid()
    code = f"""
import os
for path in ["/proc/{host_pid}/environ", f"/proc/{{os.getppid()}}/environ", "/proc/1/environ", "/etc/shadow",
             "/etc/passwd", {str(Path.home() / ".bashrc")!r}, {os.getcwd()!r} + "/pyproject.toml"]:
    try:
        print(path, "read:", open(path, "rb").read()[:80])
    except OSError as exc:
        print(path, "refused:", type(exc).__name__)
"""
    result = run_python(code, limits=limits(audit_hook))
    assert result.stdout.count("refused:") == 7 and "read:" not in result.stdout, (result.stdout, result.stderr)
    assert "PATH=" not in result.stdout


# libc through ctypes (native code, so no audit event): uid, system(), setns() into the parent's (the host's)
# network namespace, then a connection to a port on the host's loopback.
CTYPES_ESCAPE = """
import ctypes, os, socket
libc = ctypes.CDLL("libc.so.6", use_errno=True)
found = {{"uid": (os.getuid(), os.geteuid()), "system": libc.system(b"echo escaped > escaped.txt")}}
for name, path in [("setns_host", "/proc/{host_pid}/ns/net"), ("setns_parent", f"/proc/{{os.getppid()}}/ns/net"),
                   ("setns_self", "/proc/self/ns/net")]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        found[name] = f"no open: {{exc.strerror}}"
        continue
    found[name] = libc.setns(fd, 0x40000000) or "joined"
    found[name] = (found[name], os.strerror(ctypes.get_errno()))
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", {port}))
    found["connect"] = "connected"
except OSError as exc:
    found["connect"] = type(exc).__name__
print(found)
"""


def redis_or_server_port(server_port: int) -> int:
    """Redis's 6379 when it answers here (as in the probe), else a listening server of this test."""
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
        return 6379
    except OSError:
        return server_port


@pytest.fixture
def listening_port() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def test_native_code_through_ctypes_runs_as_nobody_without_namespaces_to_join(listening_port: int) -> None:
    port = redis_or_server_port(listening_port)
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # live from the host
    program = CTYPES_ESCAPE.format(port=port, host_pid=os.getpid())
    result = run_python(program, limits=limits(audit_hook=False))
    assert result.returncode == 0, result.stderr
    found = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert found["uid"] == (NOBODY, NOBODY), found
    assert found["system"] != 0  # no shell in the sandbox (and no way out if there were one)
    assert found["setns_host"] == "no open: No such file or directory", found  # the host's pids are not in /proc
    assert found["setns_parent"] == "no open: Permission denied", found  # the parent is the sandbox's own init
    assert found["setns_self"] == (-1, "Operation not permitted"), found  # no capability in any namespace
    assert found["connect"] == "ConnectionRefusedError", found  # the loopback is the sandbox's own
    # with the hook on, ctypes does not even import
    hooked = run_python(program, limits=limits())
    assert hooked.returncode == 1 and "importing ctypes is not allowed" in hooked.stderr


EXTENSION_C = r"""
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static PyObject *probe(PyObject *self, PyObject *args) {
    const char *secret, *ns; int port;
    if (!PyArg_ParseTuple(args, "ssi", &secret, &ns, &port)) return NULL;
    char buf[64] = {0};
    int fd = open(secret, O_RDONLY), got = -errno;
    if (fd >= 0) { got = (int)read(fd, buf, sizeof buf - 1); close(fd); }
    int sys_status = system("echo escaped");
    int nsfd = open(ns, O_RDONLY);
    int joined = nsfd < 0 ? -1000 - errno : (setns(nsfd, CLONE_NEWNET) == 0 ? 0 : -errno);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(port); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int conn = connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : -errno;
    return Py_BuildValue("{s:i,s:s,s:i,s:i,s:i,s:i}", "uid", (int)geteuid(), "secret", buf, "read", got,
                         "system", sys_status, "setns", joined, "connect", conn);
}
static PyMethodDef methods[] = {{"probe", probe, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "escape", NULL, -1, methods};
PyMODINIT_FUNC PyInit_escape(void) { return PyModule_Create(&module); }
"""

LOAD_EXTENSION = """
import base64, os, sys
name = "escape" + {suffix!r}
with open(name, "wb") as f:
    f.write(base64.b64decode({blob!r}))
sys.path.insert(0, os.getcwd())
import escape
print(escape.probe({secret!r}, {ns!r}, {port}))
"""


@pytest.fixture(scope="module")
def extension_blob(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A tiny C extension (compiled here with cc) as base64, and its file suffix."""
    include = sysconfig.get_paths()["include"]
    if shutil.which("cc") is None or not Path(include, "Python.h").exists():
        pytest.skip("no C compiler or Python headers (the ctypes test covers native code)")
    folder = tmp_path_factory.mktemp("extension")
    (folder / "escape.c").write_text(EXTENSION_C)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", f"-I{include}", "-o", str(folder / f"escape{suffix}"),
                    str(folder / "escape.c")], check=True, capture_output=True, timeout=120)
    return base64.b64encode((folder / f"escape{suffix}").read_bytes()).decode(), suffix


@HOOK
def test_a_native_extension_from_the_work_folder_reaches_nothing(extension_blob: tuple[str, str], secret_dir: Path,
                                                                  listening_port: int, audit_hook: bool) -> None:
    blob, suffix = extension_blob
    port = redis_or_server_port(listening_port)
    code = LOAD_EXTENSION.format(suffix=suffix, blob=blob, secret=str(secret_dir / "secret_key"),
                                 ns=f"/proc/{os.getpid()}/ns/net", port=port)
    result = run_python(code, limits=limits(audit_hook))
    if audit_hook:  # the hook admits native code from the standard library only
        assert result.returncode == 1 and "native module escape from outside the standard library" in result.stderr, (
            result.stdout, result.stderr)
        return
    assert result.returncode == 0, result.stderr
    found = ast.literal_eval(result.stdout.strip().splitlines()[-1])  # the dict the extension returned
    assert found["uid"] == NOBODY and found["secret"] == "" and found["read"] == -2  # ENOENT: not mounted
    assert found["system"] != 0 and "escaped" not in result.stdout
    assert found["setns"] != 0 and found["connect"] != 0, found


def test_a_fork_bomb_is_bounded_by_the_process_limit() -> None:
    """Without the hook, forks happen; RLIMIT_NPROC (uid 65534 of the run's own user namespace) stops them at
    max_processes, long before the time limit."""
    bomb = """
import os, time
forked = 0
try:
    for _ in range(300):
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        forked += 1
except OSError as exc:
    print("stopped:", type(exc).__name__)
print("forked", forked)
"""
    result = run_python(bomb, limits=SandboxLimits(timeout_s=10.0, audit_hook=False, max_processes=8))
    assert "stopped: BlockingIOError" in result.stdout, (result.stdout, result.stderr)
    forked = int(result.stdout.split("forked ")[1])
    assert 1 <= forked <= 8 and not result.timed_out and result.duration_s < 5


def test_a_disk_fill_stops_at_the_work_folder_size() -> None:
    fill = """
import os
written = 0
try:
    for i in range(64):
        with open(f"fill{i}", "wb") as f:
            for _ in range(4):
                f.write(b"x" * 1024 * 1024)
                f.flush()
                written += 1024 * 1024
except OSError as exc:
    print("stopped:", exc.errno)
print("written", written)
"""
    result = run_python(fill, limits=SandboxLimits(timeout_s=20.0, disk_mb=8, max_output_bytes=4 * 1024 * 1024))
    assert "stopped: 28" in result.stdout, (result.stdout, result.stderr)  # ENOSPC
    assert int(result.stdout.split("written ")[1]) <= 8 * 1024 * 1024


# -- no bubblewrap: refused, never run unsandboxed --------------------------------------------------------
FAILING_BWRAP = "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"


@pytest.fixture(params=["missing", "no namespaces"])
def broken_bwrap(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A PATH without bwrap, or with a bwrap that fails as it does where the kernel refuses namespaces."""
    if request.param == "no namespaces":
        fake = tmp_path / "bwrap"
        fake.write_text(FAILING_BWRAP)
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    bubblewrap_problem.cache_clear()
    yield "bwrap is not installed" if request.param == "missing" else "No permissions to create a new namespace"
    monkeypatch.undo()
    bubblewrap_problem.cache_clear()


def test_without_bubblewrap_use_local_is_refused_at_validation_build_and_run(broken_bwrap: str) -> None:
    result = validate_config(changed({"rewards": {"code": {"reward_type": "code_sandbox", "use_local": True}}}))
    errors = [e for e in result.errors if e.path == "rewards.code.use_local"]
    assert errors and broken_bwrap in errors[0].message, result.errors
    assert "install the Debian package bubblewrap" in errors[0].message and "code_url" in errors[0].message
    remote = validate_config(changed({"rewards": {"code": {"reward_type": "code_sandbox", "use_local": False,
                                                           "code_url": "http://sandbox:8080/run_code"}}}))
    assert not [e for e in remote.errors if e.path.startswith("rewards.code")], remote.errors
    with pytest.raises(ValueError, match=r"^use_local: the local code sandbox runs untrusted code only under "
                                         r"bubblewrap, and .*install the Debian package bubblewrap"):
        build_reward("code_sandbox")
    with pytest.raises(SandboxUnavailable, match=broken_bwrap):
        run_python("print('ran')", limits=limits())
