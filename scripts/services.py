"""Start and stop PolicyLab's local services: Redis, a Ray head, Celery worker + beat, the telemetry
ingest consumer, the ASGI server.

Each `start_*` function starts ONE process in its own session (process group), waits until it
answers a health check, and returns a `Service` that owns it; `Service.stop()` stops that process
group and nothing else. Nothing here runs `ray stop` or touches processes it did not start.

    python scripts/services.py up                 # everything that is missing, until Ctrl-C
    python scripts/services.py up --no-web        # Redis, Ray, Celery worker + beat, ingest
    python scripts/services.py up --only redis,ray

Environment (same names as the Django settings): REDIS_URL, RAY_ADDRESS, DATABASE_URL,
POLICYLAB_RUNS_DIR. A Redis or Ray head that already answers at those addresses is used as is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parent.parent
PLATFORM_DIR = REPO_ROOT / "platform"
DEFAULT_VAR_DIR = REPO_ROOT / "var"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"
# Ray hands ports 10002-19999 to its workers by default: nothing we pick may fall in there.
RAY_WORKER_PORTS = range(10002, 20000)


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


def _spawn(name: str, argv: list[str], log_path: Path, address: str, env: Mapping[str, str],
           cwd: Path = REPO_ROOT) -> Service:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=dict(env), cwd=cwd, start_new_session=True)
    return Service(name=name, process=process, address=address, log_path=log_path)


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


# --- Ray head ----------------------------------------------------------------------------------

def ray_answers(address: str, timeout: float = 1.0) -> bool:
    """True when the Ray dashboard at `address` serves the job API."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout) as response:
            return "ray_version" in json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return False


def start_ray_head(var_dir: Path = DEFAULT_VAR_DIR, *, dashboard_port: int = 8265, num_cpus: int = 8,
                   object_store_memory: int | None = None, temp_dir: Path | None = None,
                   timeout: float = 90.0) -> Service:
    """`ray start --head --block` with every port chosen explicitly, so two heads on one machine
    never collide and none falls in Ray's worker port range.

    `--block` keeps `ray start` in the foreground: SIGTERM to it shuts down every Ray process it
    started (raylet, GCS, dashboard, workers, job drivers); `Service.stop()` does exactly that.
    `temp_dir` must be short: Ray puts Unix sockets under it (107-character limit).
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
            *(f"{flag}={port}" for flag, port in ports.items())]
    if object_store_memory:
        argv.append(f"--object-store-memory={object_store_memory}")
    address = f"http://127.0.0.1:{dashboard_port}"
    # No drain on SIGTERM: a local head has no traffic to hand over, and draining delays teardown.
    env = service_env({"RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"})
    service = _spawn("ray-head", argv, var_dir / "logs" / f"ray-head-{dashboard_port}.log", address, env)
    service.extra["gcs_address"] = f"127.0.0.1:{gcs_port}"
    wait_until(lambda: ray_answers(address), timeout, service, "job API")
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


@contextlib.contextmanager
def running_services(only: tuple[str, ...] = ALL_SERVICES, *, var_dir: Path = DEFAULT_VAR_DIR,
                     web_host: str = "127.0.0.1", web_port: int = 8000,
                     log: Callable[[str], None] = print) -> Iterator[dict[str, str]]:
    """Start what is missing of `only`, yield the environment the platform should use, then stop
    everything that was started here, in reverse order (also on Ctrl-C or an error)."""
    started: list[Service] = []
    env = {
        "REDIS_URL": os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
        "RAY_ADDRESS": os.environ.get("RAY_ADDRESS", DEFAULT_RAY_ADDRESS),
        "POLICYLAB_RUNS_DIR": os.environ.get("POLICYLAB_RUNS_DIR", str(var_dir / "runs")),
    }
    try:
        if "redis" in only:
            if redis_answers(env["REDIS_URL"]):
                log(f"redis: using {env['REDIS_URL']}")
            else:
                port = urlparse(env["REDIS_URL"]).port or 6379
                service = start_redis(var_dir, port)
                started.append(service)
                log(f"redis: started {service.address} (log {service.log_path})")
        if "ray" in only:
            if ray_answers(env["RAY_ADDRESS"]):
                log(f"ray: using {env['RAY_ADDRESS']}")
            else:
                service = start_ray_head(var_dir, dashboard_port=urlparse(env["RAY_ADDRESS"]).port or 8265)
                started.append(service)
                log(f"ray: started head {service.address} (log {service.log_path})")
        if "worker" in only:
            started.append(start_celery_worker(env, var_dir))
            log(f"celery worker: ready (log {started[-1].log_path})")
        if "beat" in only:
            started.append(start_celery_beat(env, var_dir))
            log(f"celery beat: ready (log {started[-1].log_path})")
        if "ingest" in only:
            started.append(start_ingest(env, var_dir))
            log(f"ingest: ready (log {started[-1].log_path})")
        if "web" in only:
            started.append(start_asgi(env, var_dir, host=web_host, port=web_port))
            log(f"web: {started[-1].address}")
        yield env
    finally:
        if started:
            log(f"stopping {', '.join(service.name for service in reversed(started))}")
            stop_processes([service.process for service in started], timeout=20.0)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """Make SIGTERM (e.g. from a parent script) unwind like Ctrl-C, so `running_services` stops
    everything it started; SIGINT explicitly too, since a shell starts background jobs with SIGINT
    ignored."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


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
    args = parser.parse_args(argv)

    only = tuple(name.strip() for name in args.only.split(",") if name.strip())
    unknown = sorted(set(only) - set(ALL_SERVICES))
    if unknown:
        parser.error(f"--only: unknown service(s) {unknown}; valid: {', '.join(ALL_SERVICES)}")
    if args.no_web:
        only = tuple(name for name in only if name != "web")

    stop_on_signals()
    try:
        with running_services(only, var_dir=args.var_dir, web_host=args.host, web_port=args.port):
            print("all services up; Ctrl-C stops what was started here", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
