"""Start and stop PolicyLab's local services: Redis, a Ray head, Celery worker + beat, the telemetry
ingest consumer, the ASGI server.

Each `start_*` function starts ONE process in its own session (process group), waits until it
answers a health check, and returns a `Service` that owns it; `Service.stop()` stops that process
group and nothing else. Nothing here runs `ray stop` or touches processes it did not start.

    python scripts/services.py up                 # everything that is missing, until Ctrl-C
    python scripts/services.py up --no-web        # Redis, Ray, Celery worker + beat, ingest
    python scripts/services.py up --only redis,ray
    python scripts/services.py up --nodes 2       # a Ray head and a second Ray node on this machine

A service that exits while `up` runs is started again (Platform.restart_dead).

Environment (same names as the Django settings): REDIS_URL, RAY_ADDRESS, DATABASE_URL,
POLICYLAB_RUNS_DIR, POLICYLAB_RAY_AUTH_TOKEN_PATH. A Redis or Ray head that already answers at those
addresses is used as is.

The Ray cluster started here runs with Ray's token authentication (RAY_AUTH_MODE=token): its dashboard, job
API and GCS refuse any request without the deployment's token, which is generated once into
`<var>/ray_auth_token` (mode 0600) and handed to Ray's processes as a path (RAY_AUTH_TOKEN_PATH), to the
platform's processes as POLICYLAB_RAY_AUTH_TOKEN_PATH (docs/decisions/0047).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parent.parent
PLATFORM_DIR = REPO_ROOT / "platform"
DEFAULT_VAR_DIR = REPO_ROOT / "var"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"
# Ray hands ports 10002-19999 to its workers by default: nothing we pick may fall in there.
RAY_WORKER_PORTS = range(10002, 20000)


RAY_TOKEN_PATH_VAR = "POLICYLAB_RAY_AUTH_TOKEN_PATH"  # the platform's processes read the Ray token here


class ServiceError(RuntimeError):
    """A service did not start or did not become healthy in time."""


@dataclass
class Service:
    """A process this module started (leader of its own process group) and where it answers."""

    name: str
    process: subprocess.Popen
    address: str
    log_path: Path
    extra: dict[str, str] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, wait, then SIGKILL what is left of it."""
        stop_process_group(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL the process group at once (a crash, for tests)."""
        stop_process_group(self.process, timeout=0.0)


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, session id, start time) of every live process (Linux /proc)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # After the parenthesised command name: state ppid pgrp session ... (starttime is field 22)
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[19])
    return table


def process_tree(root: int) -> set[tuple[int, str]]:
    """(pid, start time) of `root`, its descendants and every other member of its session.

    Ray job drivers call setsid, so they leave the session: the parent links still find them."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, sid, _) in table.items() if sid == root}
    stack = [root, *found]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return {(pid, table[pid][2]) for pid in found if pid in table}


def stop_process_group(process: subprocess.Popen, timeout: float) -> None:
    """Stop the session led by `process` (started with start_new_session=True) and all it spawned."""
    stop_processes([process], timeout)


def stop_processes(processes: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM each leader's process group at once, wait up to `timeout` for all, then SIGKILL
    every survivor. Process trees are recorded first, so orphans re-parented during shutdown are
    still ours to kill; the start time guards against a recycled pid."""
    members = set().union(*(process_tree(p.pid) for p in processes)) if processes else set()
    live = [p for p in processes if p.poll() is None]
    if timeout > 0:
        for process in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        members |= process_tree(process.pid)
    alive = _proc_table()
    for pid, started in members:
        if pid in alive and alive[pid][2] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def free_port() -> int:
    """A free TCP port on 127.0.0.1, outside Ray's worker port range."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in RAY_WORKER_PORTS:
            return port


def service_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for every process we start: the venv first on PATH, repo + platform/ importable,
    one Ray auth mode everywhere (a mismatch makes the job API demand a token)."""
    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    paths = [str(REPO_ROOT), str(PLATFORM_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra or {})
    return env


def wait_until(check: Callable[[], bool], timeout: float, service: Service, what: str) -> None:
    """Poll `check` until it is true; stop the service and raise with its log tail otherwise."""
    deadline = time.monotonic() + timeout
    while not check():
        if not service.alive():
            raise ServiceError(f"{service.name} exited (code {service.process.returncode}) before {what}:\n"
                               f"{service.log_tail()}")
        if time.monotonic() > deadline:
            service.stop()
            raise ServiceError(f"{service.name}: no {what} after {timeout:.0f} s:\n{service.log_tail()}")
        time.sleep(0.2)


def spawn(argv: list[str], log_path: Path, env: Mapping[str, str], cwd: Path = REPO_ROOT) -> subprocess.Popen:
    """Start `argv` in a session of its own (stop_processes stops it and all it spawns), its output appended
    to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env), cwd=cwd, start_new_session=True)


def _spawn(name: str, argv: list[str], log_path: Path, address: str, env: Mapping[str, str],
           cwd: Path = REPO_ROOT) -> Service:
    return Service(name=name, process=spawn(argv, log_path, env, cwd), address=address, log_path=log_path)


def wait_listening(port: int, process: subprocess.Popen, what: str, *, timeout: float = 60.0,
                   log_path: Path | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:`port`; raise ServiceError (with the tail of
    `log_path`) when `process` exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                tail = f":\n{log_path.read_text(errors='replace')[-3000:]}" if log_path and log_path.exists() else ""
                raise ServiceError(f"{what} did not start (exit {process.poll()}){tail}") from None
            time.sleep(0.2)


# --- Redis -------------------------------------------------------------------------------------

def redis_answers(url: str, timeout: float = 0.5) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379),
                                      timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(var_dir: Path = DEFAULT_VAR_DIR, port: int | None = None, timeout: float = 10.0) -> Service:
    """A throw-away redis-server (no persistence) on `port` (a free one by default)."""
    port = port or free_port()
    work = var_dir / "redis"
    work.mkdir(parents=True, exist_ok=True)
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", str(work)]
    service = _spawn("redis", argv, var_dir / "logs" / "redis.log", f"redis://127.0.0.1:{port}/0",
                     service_env())
    wait_until(lambda: redis_answers(service.address), timeout, service, "PONG")
    return service


# --- PostgreSQL (tests on a machine without one) -----------------------------------------------

def postgres_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


def postgres_bin_dir() -> Path:
    """The newest Debian-installed PostgreSQL server binaries (package `postgresql`)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise ServiceError("no PostgreSQL server binaries in /usr/lib/postgresql: apt-get install postgresql")
    return found[-1].parent


def start_postgres(port: int | None = None, timeout: float = 60.0) -> Service:
    """A throw-away cluster (trust auth, no fsync) in a fresh temp folder on 127.0.0.1:`port`, run in
    the foreground so that Service.stop() ends it. As root it runs as the `postgres` user, since
    initdb and postgres refuse root."""
    import shutil
    import tempfile

    port = port or free_port()
    bin_dir = postgres_bin_dir()
    data = Path(tempfile.mkdtemp(prefix="policylab-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                    "--no-sync"], check=True, capture_output=True)
    argv = [*as_user, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"]
    service = _spawn("postgres", argv, data / "server.log", f"postgres://postgres@127.0.0.1:{port}/postgres",
                     service_env())
    wait_until(lambda: postgres_answers(port), timeout, service, f"a listener on port {port}")
    service.extra["data_dir"] = str(data)
    return service


# --- Ray head ----------------------------------------------------------------------------------

def ray_token_path(var_dir: Path = DEFAULT_VAR_DIR) -> Path:
    """The deployment's Ray token file ($POLICYLAB_RAY_AUTH_TOKEN_PATH, else <var_dir>/ray_auth_token),
    generated on first use: 256 random bits, readable by this user only."""
    path = Path(os.environ.get(RAY_TOKEN_PATH_VAR) or var_dir / "ray_auth_token")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))
    return path


def ray_headers(token_path: Path | None) -> dict[str, str]:
    """The Authorization header Ray's token authentication expects; {} without a token file."""
    try:
        token = token_path.read_text().strip() if token_path else ""
    except FileNotFoundError:
        return {}
    return {"Authorization": f"Bearer {token}"} if token else {}


def ray_node_env(token_path: Path) -> dict[str, str]:
    """The environment of a Ray node started here: token authentication, the token given as a file (a path
    in the environment of Ray's processes and job drivers, not the token itself), no drain on SIGTERM (a
    local node has no traffic to hand over, and draining delays teardown)."""
    env = service_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path),
                       "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    env.pop("RAY_AUTH_TOKEN", None)
    return env


def _ray_get(url: str, timeout: float, token_path: Path | None) -> Any:
    request = urllib.request.Request(url, headers=ray_headers(token_path))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def ray_answers(address: str, timeout: float = 1.0, token_path: Path | None = None) -> bool:
    """True when the Ray dashboard at `address` serves the job API (to this token, when it demands one)."""
    try:
        return "ray_version" in _ray_get(f"{address.rstrip('/')}/api/version", timeout, token_path)
    except (OSError, ValueError, urllib.error.URLError):
        return False


def ray_auth_mode(address: str, timeout: float = 1.0) -> str:
    """The cluster's authentication mode as its dashboard reports it (a public route): token or disabled."""
    try:
        return str(_ray_get(f"{address.rstrip('/')}/api/authentication_mode", timeout, None).get("mode"))
    except (OSError, ValueError, AttributeError, urllib.error.URLError):
        return "unknown"


def ray_nodes(address: str, timeout: float = 2.0, token_path: Path | None = None) -> list[dict]:
    """The nodes the cluster's state API lists (alive and dead), [] when it does not answer."""
    try:
        url = f"{address.rstrip('/')}/api/v0/nodes?detail=true&limit=1000"
        request = urllib.request.Request(url, headers=ray_headers(token_path))
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return list(json.loads(response.read())["data"]["result"]["result"])
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError):
        return []


def node_resources(index: int, devices: int) -> dict[str, float]:
    """The custom resource that marks node `index` of a multi-node cluster, one unit per device: the
    trainer pins device d to node d // num_gpus_per_node with it (trainer.cluster.resources)."""
    from trainer.cluster.resources import node_resource

    return {node_resource(index): float(devices)}


def worker_port_range(index: int, nodes: int) -> range:
    """Node `index`'s share of Ray's worker ports, so raylets on one machine never hand out the same port."""
    size = len(RAY_WORKER_PORTS) // nodes
    start = RAY_WORKER_PORTS.start + index * size
    return range(start, start + size)


def _ray_node_argv(resources: Mapping[str, float] | None, worker_ports: range | None,
                   object_store_memory: int | None) -> list[str]:
    argv = []
    if resources:
        argv.append(f"--resources={json.dumps(dict(resources))}")
    if worker_ports:
        argv += [f"--min-worker-port={worker_ports.start}", f"--max-worker-port={worker_ports.stop - 1}"]
    if object_store_memory:
        argv.append(f"--object-store-memory={object_store_memory}")
    return argv


def start_ray_head(var_dir: Path = DEFAULT_VAR_DIR, *, dashboard_port: int = 8265, num_cpus: int = 8,
                   object_store_memory: int | None = None, temp_dir: Path | None = None,
                   resources: Mapping[str, float] | None = None, worker_ports: range | None = None,
                   timeout: float = 90.0) -> Service:
    """`ray start --head --block` with every port chosen explicitly, so two heads on one machine
    never collide and none falls in Ray's worker port range.

    `--block` keeps `ray start` in the foreground: SIGTERM to it shuts down every Ray process it
    started (raylet, GCS, dashboard, workers, job drivers); `Service.stop()` does exactly that.
    `temp_dir` must be short: Ray puts Unix sockets under it (107-character limit). `resources`: custom
    resources of the head node; `worker_ports`: its share of the worker ports when other nodes run here.
    """
    temp_dir = temp_dir or Path(f"/tmp/ray-policylab-{dashboard_port}")
    gcs_port = free_port()
    ports = {
        "--port": gcs_port,
        "--dashboard-port": dashboard_port,
        "--ray-client-server-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--runtime-env-agent-port": free_port(),
        "--metrics-export-port": free_port(),
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
    }
    argv = ["ray", "start", "--head", "--block", "--disable-usage-stats", f"--num-cpus={num_cpus}",
            "--dashboard-host=127.0.0.1", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
            *(f"{flag}={port}" for flag, port in ports.items()),
            *_ray_node_argv(resources, worker_ports, object_store_memory)]
    address = f"http://127.0.0.1:{dashboard_port}"
    token_path = ray_token_path(var_dir)
    service = _spawn("ray-head", argv, var_dir / "logs" / f"ray-head-{dashboard_port}.log", address,
                     ray_node_env(token_path))
    service.extra |= {"gcs_address": f"127.0.0.1:{gcs_port}", "temp_dir": str(temp_dir),
                      "token_path": str(token_path)}
    wait_until(lambda: ray_answers(address, token_path=token_path), timeout, service, "job API")
    return service


def start_ray_node(head: Service, var_dir: Path = DEFAULT_VAR_DIR, *, index: int, num_cpus: int = 4,
                   object_store_memory: int | None = None, resources: Mapping[str, float] | None = None,
                   worker_ports: range | None = None, temp_dir: Path | None = None,
                   timeout: float = 90.0) -> Service:
    """Another node of `head`'s cluster on this machine (`ray start --address=<GCS> --block`): a raylet
    with its own ports, temp dir and resources, as a second machine would be. Healthy once the head's
    state API lists a node started after this call as alive; `Service.stop()` ends it and its workers."""
    temp_dir = temp_dir or Path(f"{head.extra['temp_dir']}-n{index}")
    ports = {
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--runtime-env-agent-port": free_port(),
        "--metrics-export-port": free_port(),
    }
    argv = ["ray", "start", "--block", "--disable-usage-stats", f"--address={head.extra['gcs_address']}",
            f"--num-cpus={num_cpus}", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
            *(f"{flag}={port}" for flag, port in ports.items()),
            *_ray_node_argv(resources, worker_ports, object_store_memory)]
    started_ms = time.time() * 1000 - 1000
    token_path = Path(head.extra["token_path"])  # the head's: one token for the whole cluster
    service = _spawn(f"ray-node-{index}", argv, var_dir / "logs" / f"ray-node-{index}.log", head.address,
                     ray_node_env(token_path))

    def joined() -> bool:
        return any(node.get("state") == "ALIVE" and node.get("start_time_ms", 0) >= started_ms
                   and all(name in node.get("resources_total", {}) for name in resources or {})
                   for node in ray_nodes(head.address, token_path=token_path))

    wait_until(joined, timeout, service, f"node {index} alive in the cluster")
    return service


# --- Celery, ASGI --------------------------------------------------------------------------------

def _log_grows_with(path: Path, needle: bytes) -> Callable[[], bool]:
    """A check that is true once `needle` appears in what the log gets from now on."""
    offset = path.stat().st_size if path.exists() else 0

    def check() -> bool:
        try:
            with open(path, "rb") as log:
                log.seek(offset)
                return needle in log.read()
        except OSError:
            return False

    return check


def start_celery_worker(env: Mapping[str, str] | None = None, var_dir: Path = DEFAULT_VAR_DIR, *,
                        concurrency: int = 4, name: str = "worker", timeout: float = 60.0) -> Service:
    """A Celery worker for `policylab`. Threads pool: a supervisor mostly sleeps between polls of
    Ray, so one thread per supervised run is cheap; training itself runs on Ray, not here."""
    log_path = var_dir / "logs" / f"celery-{name}.log"
    ready = _log_grows_with(log_path, b" ready.")
    argv = [sys.executable, "-m", "celery", "-A", "policylab", "worker", "--loglevel=INFO",
            "--pool=threads", f"--concurrency={concurrency}", f"--hostname={name}@%h", "--without-gossip",
            "--without-mingle"]
    service = _spawn(f"celery-{name}", argv, log_path, "", service_env(env), cwd=PLATFORM_DIR)
    wait_until(ready, timeout, service, "'ready' line in its log")
    return service


def start_celery_beat(env: Mapping[str, str] | None = None, var_dir: Path = DEFAULT_VAR_DIR, *,
                      timeout: float = 60.0) -> Service:
    """Celery beat (the reconcile schedule), with its schedule file under var/."""
    log_path = var_dir / "logs" / "celery-beat.log"
    started = _log_grows_with(log_path, b"beat: Starting")
    argv = [sys.executable, "-m", "celery", "-A", "policylab", "beat", "--loglevel=INFO",
            f"--schedule={var_dir / 'celerybeat-schedule'}"]
    service = _spawn("celery-beat", argv, log_path, "", service_env(env), cwd=PLATFORM_DIR)
    wait_until(started, timeout, service, "'beat: Starting' line")
    return service


def start_ingest(env: Mapping[str, str] | None = None, var_dir: Path = DEFAULT_VAR_DIR, *,
                 timeout: float = 60.0) -> Service:
    """The telemetry ingest consumer (`manage.py ingest_events`: Redis Streams -> database)."""
    log_path = var_dir / "logs" / "ingest.log"
    reading = _log_grows_with(log_path, b"ingest_events: consumer")
    argv = [sys.executable, "-u", str(REPO_ROOT / "manage.py"), "ingest_events"]
    service = _spawn("ingest", argv, log_path, "", service_env(env))
    wait_until(reading, timeout, service, "'ingest_events: consumer' line")
    return service


def start_asgi(env: Mapping[str, str] | None = None, var_dir: Path = DEFAULT_VAR_DIR, *,
               host: str = "127.0.0.1", port: int = 8000, timeout: float = 60.0) -> Service:
    """daphne serving policylab.asgi:application (HTTP and websockets)."""
    argv = [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "policylab.asgi:application"]
    service = _spawn("asgi", argv, var_dir / "logs" / "asgi.log", f"http://{host}:{port}", service_env(env),
                     cwd=PLATFORM_DIR)

    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return True
        return False

    wait_until(listening, timeout, service, f"listener on {host}:{port}")
    return service


# --- everything ----------------------------------------------------------------------------------

ALL_SERVICES = ("redis", "ray", "worker", "beat", "ingest", "web")
RESTART_RETRY_S = 10.0  # a service that failed to start again is tried again after this long


@dataclass
class Platform:
    """The services `running_services` started, and how to start each of them again.

    `restart_dead()` is the embedded deployment's restart policy (a process supervisor's "restart on
    exit"): a service that exited (a crash, an OOM kill, kill -9) is started again with the same
    settings and ports. The nodes that joined a Ray head are restarted with it: a node cannot
    rejoin a new GCS."""

    env: dict[str, str]
    log: Callable[[str], None] = print
    services: dict[str, Service] = field(default_factory=dict)
    _starters: dict[str, Callable[[], Service]] = field(default_factory=dict, repr=False)
    _dependents: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _retry_at: dict[str, float] = field(default_factory=dict, repr=False)

    def start(self, name: str, starter: Callable[[], Service], *, after: str | None = None) -> Service:
        """Start a service with `starter` and remember how; `after`: it is restarted whenever that one is."""
        service = starter()
        self._starters[name], self.services[name] = starter, service
        if after is not None:
            self._dependents.setdefault(after, []).append(name)
        return service

    def restart_dead(self) -> list[str]:
        """Start again every service that exited (and the services that depend on it); their names."""
        restarted: list[str] = []
        skipped: set[str] = set()
        for name in list(self.services):
            service = self.services[name]
            if name in restarted or name in skipped or service.alive() or time.monotonic() < self._retry_at.get(name, 0):
                continue
            self.log(f"{name}: exited (code {service.process.returncode}); starting it again")
            for dependent in self._dependents.get(name, []):
                self.services[dependent].stop(timeout=5.0)  # it followed the dead one; started again below
            for each in [name, *self._dependents.get(name, [])]:
                self.services[each].stop(timeout=0.0)  # whatever is left of its process tree
                try:
                    self.services[each] = self._starters[each]()
                except ServiceError as error:
                    self.log(f"{each}: did not start again, retrying in {RESTART_RETRY_S:g} s: {error}")
                    self._retry_at[each] = time.monotonic() + RESTART_RETRY_S
                    skipped.update(self._dependents.get(each, []))
                    break
                restarted.append(each)
                self.log(f"{each}: started again")
        return restarted

    def stop(self) -> None:
        """Stop everything started here (all at once: SIGTERM, then SIGKILL after 20 s)."""
        if self.services:
            self.log(f"stopping {', '.join(reversed(self.services))}")
            stop_processes([service.process for service in self.services.values()], timeout=20.0)


@contextlib.contextmanager
def running_services(only: tuple[str, ...] = ALL_SERVICES, *, var_dir: Path = DEFAULT_VAR_DIR,
                     web_host: str = "127.0.0.1", web_port: int = 8000, nodes: int = 1, ray_cpus: int = 8,
                     log: Callable[[str], None] = print) -> Iterator[Platform]:
    """Start what is missing of `only`, yield the Platform (its `env` is what the platform should use),
    then stop everything that was started here (also on Ctrl-C or an error).

    nodes > 1: the Ray head and nodes - 1 more nodes on this machine share `ray_cpus` logical CPUs, node
    i marked with the resource `policylab_node_<i>` (one unit per CPU), so a run's device_mapping places
    each role on the node its device ids name (device d on node d // num_gpus_per_node)."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    env = {
        "REDIS_URL": os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
        "RAY_ADDRESS": os.environ.get("RAY_ADDRESS", DEFAULT_RAY_ADDRESS),
        "POLICYLAB_RUNS_DIR": os.environ.get("POLICYLAB_RUNS_DIR", str(var_dir / "runs")),
        RAY_TOKEN_PATH_VAR: str(ray_token_path(var_dir)),
    }
    platform = Platform(env, log)
    try:
        if "redis" in only:
            if redis_answers(env["REDIS_URL"]):
                log(f"redis: using {env['REDIS_URL']}")
            else:
                port = urlparse(env["REDIS_URL"]).port or 6379
                service = platform.start("redis", lambda: start_redis(var_dir, port))
                log(f"redis: started {service.address} (log {service.log_path})")
        if "ray" in only:
            if ray_answers(env["RAY_ADDRESS"], token_path=Path(env[RAY_TOKEN_PATH_VAR])):
                log(f"ray: using {env['RAY_ADDRESS']}" + (f" (--nodes {nodes} ignored)" if nodes > 1 else ""))
                if ray_auth_mode(env["RAY_ADDRESS"]) != "token":
                    log("ray: WARNING: its job API requires no token: anyone who reaches it can stop or start jobs "
                        "(start it with RAY_AUTH_MODE=token and this deployment's token file)")
            else:
                _start_ray(platform, var_dir, urlparse(env["RAY_ADDRESS"]).port or 8265, nodes, ray_cpus)
        if "worker" in only:
            service = platform.start("worker", lambda: start_celery_worker(env, var_dir))
            log(f"celery worker: ready (log {service.log_path})")
        if "beat" in only:
            service = platform.start("beat", lambda: start_celery_beat(env, var_dir))
            log(f"celery beat: ready (log {service.log_path})")
        if "ingest" in only:
            service = platform.start("ingest", lambda: start_ingest(env, var_dir))
            log(f"ingest: ready (log {service.log_path})")
        if "web" in only:
            service = platform.start("web", lambda: start_asgi(env, var_dir, host=web_host, port=web_port))
            log(f"web: {service.address}")
        yield platform
    finally:
        platform.stop()


def cpus_per_node(nodes: int, ray_cpus: int = 8) -> int:
    """Logical CPUs (devices, on a CPU cluster) of each of `nodes` Ray nodes sharing `ray_cpus`."""
    return max(2, ray_cpus // nodes)


def _start_ray(platform: Platform, var_dir: Path, dashboard_port: int, nodes: int, ray_cpus: int) -> None:
    """A Ray head, and nodes - 1 more nodes joined to it, each marked with its node resource when nodes > 1."""
    cpus = cpus_per_node(nodes, ray_cpus)
    if nodes == 1:
        head = platform.start("ray-head", lambda: start_ray_head(var_dir, dashboard_port=dashboard_port,
                                                                 num_cpus=ray_cpus))
        platform.log(f"ray: started head {head.address} (log {head.log_path})")
        return
    head = platform.start("ray-head", lambda: start_ray_head(
        var_dir, dashboard_port=dashboard_port, num_cpus=cpus, resources=node_resources(0, cpus),
        worker_ports=worker_port_range(0, nodes)))
    platform.log(f"ray: started head {head.address} as node 0 of {nodes}, {cpus} CPUs each (log {head.log_path})")
    for index in range(1, nodes):
        node = platform.start(f"ray-node-{index}", functools.partial(_start_node, platform, var_dir, index, nodes, cpus),
                              after="ray-head")
        platform.log(f"ray: node {index} joined (log {node.log_path})")


def _start_node(platform: Platform, var_dir: Path, index: int, nodes: int, cpus: int) -> Service:
    return start_ray_node(platform.services["ray-head"], var_dir, index=index, num_cpus=cpus,
                          resources=node_resources(index, cpus), worker_ports=worker_port_range(index, nodes))


def watch(platform: Platform, interval: float = 1.0) -> None:
    """Restart services that exit, until Ctrl-C / SIGTERM (which raise KeyboardInterrupt here)."""
    while True:
        time.sleep(interval)
        platform.restart_dead()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """Make SIGTERM (e.g. from a parent script) unwind like Ctrl-C, so `running_services` stops
    everything it started; SIGINT explicitly too, since a shell starts background jobs with SIGINT
    ignored."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def serve(only: tuple[str, ...] = ALL_SERVICES, *, var_dir: Path = DEFAULT_VAR_DIR, web_host: str = "127.0.0.1",
          web_port: int = 8000, nodes: int = 1, log: Callable[[str], None] = print,
          when_up: Callable[[Platform], None] = lambda platform: None, error_prefix: str = "") -> int:
    """Start what is missing of `only`, call `when_up`, and restart services that exit until Ctrl-C or SIGTERM,
    then stop what was started here: `up`, and scripts/run_platform.py with the demo. Returns the exit code:
    0 when interrupted, 1 when a service could not start (said on stderr after `error_prefix`)."""
    stop_on_signals()
    try:
        with running_services(only, var_dir=var_dir, web_host=web_host, web_port=web_port, nodes=nodes,
                              log=log) as platform:
            when_up(platform)
            watch(platform)
    except KeyboardInterrupt:
        return 0
    except ServiceError as error:
        print(f"{error_prefix}error: {error}", file=sys.stderr)
        return 1


def serve_postgres(port: int | None) -> int:
    """Start a throw-away PostgreSQL, print its URL on stdout, keep it until SIGTERM/Ctrl-C, remove it."""
    import shutil

    stop_on_signals()
    try:
        service = start_postgres(port)
    except (ServiceError, subprocess.CalledProcessError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(service.address, flush=True)
    try:
        while service.alive():
            time.sleep(1)
        print(f"postgres exited:\n{service.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        service.stop()
        shutil.rmtree(service.extra["data_dir"], ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start what is missing and wait for Ctrl-C")
    up.add_argument("--only", default=",".join(ALL_SERVICES),
                    help=f"comma-separated subset of {', '.join(ALL_SERVICES)}")
    up.add_argument("--no-web", action="store_true", help="do not start the ASGI server")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--var-dir", type=Path, default=DEFAULT_VAR_DIR)
    up.add_argument("--nodes", type=int, default=1, help="Ray nodes on this machine (head + nodes - 1)")
    pg = sub.add_parser("postgres", help="a throw-away PostgreSQL on a free port until SIGTERM (for tests)")
    pg.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "postgres":
        return serve_postgres(args.port)

    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    unknown = sorted(set(only) - set(ALL_SERVICES))
    if unknown:
        parser.error(f"--only: unknown service(s) {unknown}; valid: {', '.join(ALL_SERVICES)}")
    if args.no_web:
        only = tuple(name for name in only if name != "web")

    return serve(only, var_dir=args.var_dir, web_host=args.host, web_port=args.port, nodes=args.nodes,
                 when_up=lambda platform: print("all services up; Ctrl-C stops what was started here", flush=True))


if __name__ == "__main__":
    sys.exit(main())
