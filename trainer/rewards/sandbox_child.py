"""The sandbox's child: run by trainer.rewards.sandbox under bubblewrap as
`python -I -S -B sandbox_child.py '<config json>'`.

Standard library only, and never imported by the trainer: it runs in a fresh, single-threaded interpreter
inside the sandbox's namespaces, finishes the setup, reports what it measured on the report file descriptor,
then executes the untrusted program as `__main__`:

1. user: as root on the host, bwrap leaves it uid 0 of its own user namespace with CAP_SETUID/CAP_SETGID
   only; it becomes 65534 (no groups), which drops every capability. It refuses to run the program unless it
   is 65534 with no capabilities left;
2. resource limits: RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE (output and files), RLIMIT_NOFILE,
   RLIMIT_CORE=0, RLIMIT_NPROC (its own tasks + max_processes: the user namespace is this run's alone);
3. every inherited file descriptor above stderr is closed;
4. an audit hook (PEP 578), a second layer behind the namespaces, refusing inside this interpreter: sockets
   (connect, bind, send, name lookups), process creation (fork, exec, spawn, system, subprocess,
   _posixsubprocess), signals to other processes, ctypes, loading native code from outside the standard
   library, swapping a function's code, writing or deleting files outside the working directory, and
   reading files outside the working directory and the standard library. An audit hook alone is no
   security boundary (docs/decisions/0046-bubblewrap-sandbox.md): the namespaces are.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Callable
from typing import Any

NOBODY = 65534
SETUP_EXIT = 70  # refused to run the program: the sandbox is not as it must be
MAX_FILES = 64
FD_CEILING = 1 << 20
NAMESPACE_NAMES = ("user", "pid", "net", "mnt", "ipc", "uts", "cgroup")

REFUSED_EVENTS = frozenset({
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo", "socket.sethostname",
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile",
    "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "pty.spawn",
    "os.symlink", "os.link", "os.chown", "os.setxattr", "os.removexattr", "sys.remote_exec",
    "webbrowser.open", "urllib.Request",
})
# modules whose functions start processes or call C without an audit event of their own
REFUSED_MODULES = frozenset({"_posixsubprocess", "_ctypes", "ctypes", "_xxsubinterpreters", "_testcapi",
                             "_testinternalcapi"})
# events carrying a path to write, delete or rename (the arguments holding paths)
WRITE_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.mkdir": (0,), "os.chmod": (0,),
                "os.truncate": (0,), "os.utime": (0,), "shutil.rmtree": (0,), "shutil.move": (0, 1),
                "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.make_archive": (0,)}
READ_ONLY_DEVICES = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero", "/etc/localtime",
                     "/usr/share/zoneinfo")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def become_nobody() -> None:
    """uid and gid 65534, no supplementary groups; from uid 0 this also clears every capability."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def status_fields() -> dict[str, str]:
    with open("/proc/self/status") as status:
        return {key: value.strip() for key, _, value in (line.partition(":") for line in status)}


def namespaces() -> dict[str, str]:
    return {name: os.readlink(f"/proc/self/ns/{name}") for name in NAMESPACE_NAMES
            if os.path.exists(f"/proc/self/ns/{name}")}


def tasks_of(uid: int) -> int:
    """Tasks (threads count) of a real uid: what RLIMIT_NPROC compares with."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def set_limits(cfg: dict[str, Any]) -> str:
    """Apply the resource limits; the process limit as text. The user namespace is this run's alone, so
    the tasks of uid 65534 it sees are its own."""
    memory = cfg["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["max_output_bytes"], cfg["max_output_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FILES, MAX_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    allowed = tasks_of(os.getuid()) + cfg["max_processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (allowed, allowed))
    return f"limit {allowed} tasks of uid {os.getuid()}"


def under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def resolved(path: Any) -> str | None:
    if isinstance(path, int) or path is None:
        return None
    return os.path.realpath(os.fsdecode(path))


def opens_for_writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def make_hook(workdir: str, readable: tuple[str, ...]) -> Callable[[str, tuple[Any, ...]], None]:
    """The audit hook; its state is immutable (strings, tuples, frozensets). Native code loads from the
    standard library only, never from the (writable) work folder."""
    writable = (workdir,)
    native = tuple(root for root in readable if root != workdir)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in REFUSED_EVENTS or event.startswith("ctypes."):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import":
            module, filename = args[0], args[1]
            if module in REFUSED_MODULES or module.split(".")[0] in REFUSED_MODULES:
                raise PermissionError(f"sandbox: importing {module} is not allowed")
            if filename and not str(filename).endswith((".py", ".pyc")) and not under(resolved(filename) or "", native):
                raise PermissionError(f"sandbox: native module {module} from outside the standard library")
        elif event == "object.__setattr__" and args[1] in ("__code__", "__defaults__", "__kwdefaults__"):
            raise PermissionError(f"sandbox: setting a function's {args[1]} is not allowed")
        elif event == "open":
            path = resolved(args[0])
            if path is None:
                return
            roots = writable if opens_for_writing(args[1], args[2] if len(args) > 2 else None) else readable
            if not under(path, roots):
                raise PermissionError(f"sandbox: opening {path} is not allowed")
        elif event in ("os.listdir", "os.scandir"):
            path = resolved(args[0] if args and args[0] is not None else ".")
            if path is not None and not under(path, readable):
                raise PermissionError(f"sandbox: listing {path} is not allowed")
        elif event in WRITE_EVENTS:
            for i in WRITE_EVENTS[event]:
                path = resolved(args[i]) if i < len(args) else None
                if path is not None and not under(path, writable):
                    raise PermissionError(f"sandbox: {event} on {path} is not allowed")

    return hook


def readable_roots(workdir: str) -> tuple[str, ...]:
    stdlib = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    stdlib |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    return (workdir, *sorted(stdlib), *READ_ONLY_DEVICES)


def run_program(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        source = f.read()
    code = compile(source, "solution.py", "exec")
    namespace = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}
    exec(code, namespace)


def main(config_json: str) -> None:
    cfg = json.loads(config_json)
    workdir = os.path.realpath(cfg["workdir"])
    if cfg["drop_user"]:
        become_nobody()
    fields = status_fields()
    if os.getuid() != NOBODY or os.getgid() != NOBODY or os.getgroups() or int(fields["CapEff"], 16) \
            or int(fields["CapPrm"], 16):
        sys.stderr.write(f"sandbox: refusing to run: uid {os.getuid()}, gid {os.getgid()}, groups "
                         f"{os.getgroups()}, capabilities {fields['CapEff']}\n")
        sys.exit(SETUP_EXIT)
    facts = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "capabilities": fields["CapEff"],
             "no_new_privs": fields.get("NoNewPrivs"), "namespaces": namespaces(), "processes": set_limits(cfg)}
    readable = readable_roots(workdir)
    with os.fdopen(cfg["report_fd"], "w") as report:
        json.dump(facts, report)
    os.closerange(3, FD_CEILING)  # whatever bwrap or the parent left open
    os.environ.pop("PWD", None)  # bwrap's --chdir sets it; the environment is PATH, LANG, LC_ALL, HOME, TMPDIR
    if cfg["audit_hook"]:
        sys.addaudithook(make_hook(workdir, readable))
    del cfg
    run_program(os.path.join(workdir, "solution.py"))


if __name__ == "__main__":
    main(sys.argv[1])
