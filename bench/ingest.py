"""Ingest benchmark: trainer emitter -> Redis Stream -> `manage.py ingest_events` -> database ->
Channels group -> websocket client, against the same metric volume logged to a local MLflow
tracking server with `MlflowClient.log_batch`.

    python bench/ingest.py                       # SQLite (the embedded default)
    python bench/ingest.py --database-url postgres://postgres@127.0.0.1:5432/policylab_bench

MLflow lives in its own virtualenv so that its pins never touch the platform's:
    python -m venv var/mlflow-venv && var/mlflow-venv/bin/pip install -r bench/requirements-mlflow.txt

Phases (each on fresh services started here: redis-server, daphne, ingest_events, mlflow server):
1. throughput: emit --points metric points (--keys per `metrics` event) as fast as the emitter can;
   rate = points / (last websocket receipt - first emit).
2. latency: emit at --paced-rate points/s for --paced-seconds; per event, websocket receipt time
   minus the event's `time` (stamped at emit): p50 and p99.
3. MLflow: the same number of points via log_batch (1000 metrics per call, MLflow's limit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "platform")]

from bench.platform_setup import bench_run, server_env, start_daphne  # noqa: E402
from scripts.services import free_port, spawn, start_redis, stop_processes, wait_listening  # noqa: E402

MLFLOW_CLIENT = r"""
import json, sys, time
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

uri, points, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = MlflowClient(tracking_uri=uri)
experiment = client.create_experiment(f"bench-{time.time()}")
run = client.create_run(experiment)
now = int(time.time() * 1000)
metrics = [Metric(f"group{k % 8}/metric_{k}", float(step * k % 97), now + step, step)
           for step in range(points // keys) for k in range(keys)]
start = time.perf_counter()
for i in range(0, len(metrics), 1000):
    client.log_batch(run.info.run_id, metrics=metrics[i:i + 1000])
elapsed = time.perf_counter() - start
stored = sum(len(client.get_metric_history(run.info.run_id, f"group{k % 8}/metric_{k}")) for k in range(keys))
print(json.dumps({"points": len(metrics), "seconds": elapsed, "stored": stored}))
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(processes: dict[str, subprocess.Popen]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each server, by the producer processes this one waited for,
    and by this process (the websocket client): where a point's cost goes, whatever the machine's load."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, proc in processes.items():
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    used["producer (trainer side, start-up included)"] = children.ru_utime + children.ru_stime
    used["websocket client"] = time.process_time()
    return used


def setup_django(database_url: str, redis_url: str, work: Path):
    """Configure Django on a fresh database; returns (run, session cookie)."""
    run, session = bench_run(database_url, redis_url, work, status="running")
    from django.conf import settings

    return run, f"{settings.SESSION_COOKIE_NAME}={session}"


def emit(emitter, steps: int, keys: int, first_step: int, rate: float | None) -> None:
    """`steps` metrics events of `keys` values each; paced to `rate` points/s when given."""
    start = time.perf_counter()
    for i in range(steps):
        step = first_step + i
        emitter.metrics({f"group{k % 8}/metric_{k}": float(step * k % 97) for k in range(keys)}, step)
        if rate:
            ahead = start + (i + 1) * keys / rate - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)


def produce(run_id: str, redis_url: str, jsonl: Path, steps: int, keys: int, first_step: int, rate: float | None) -> None:
    """The trainer's side, in a process of its own: EventEmitter -> events.jsonl + Redis Stream."""
    from trainer.telemetry import EventEmitter, JsonlSink
    from trainer.telemetry.redis_stream import RedisStreamSink

    stream = RedisStreamSink(redis_url, run_id)
    emitter = EventEmitter(run_id, 1, [JsonlSink(jsonl, flush_every=64), stream])
    emit(emitter, steps, keys, first_step, rate)
    stream.flush(timeout=120)
    emitter.close()


def producer_process(run_id: str, redis_url: str, jsonl: Path, steps: int, keys: int, first_step: int,
                     rate: float | None) -> subprocess.Popen:
    argv = [sys.executable, __file__, "--produce", run_id, redis_url, str(jsonl), str(steps), str(keys),
            str(first_step), str(rate or 0)]
    return subprocess.Popen(argv, cwd=REPO_ROOT)


def origin_of(ws_url: str) -> str:
    """The Origin a browser on the page of `ws_url` sends: scheme, host and port (the server checks all three)."""
    parts = urlsplit(ws_url)
    return f"{'https' if parts.scheme == 'wss' else 'http'}://{parts.netloc}"


async def receive(ws_url: str, cookie: str, expected_events: int, produce, timeout: float) -> list[tuple[float, float, int]]:
    """Connect, then call `produce` (starts the producer process) and collect (receipt time, emit
    time, points) per metrics event."""
    import aiohttp

    got: list[tuple[float, float, int]] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(
        ws_url, headers={"Cookie": cookie, "Origin": origin_of(ws_url)}, max_msg_size=0
    ) as ws:
        while "seq" not in json.loads((await ws.receive()).data):  # snapshot frames
            pass
        producer = produce()
        deadline = time.monotonic() + timeout
        while len(got) < expected_events and time.monotonic() < deadline:
            if producer.poll():  # the producer failed: nothing more will come
                raise SystemExit(f"producer exited with code {producer.returncode}")
            try:
                message = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            now = time.time()
            for event in json.loads(message.data).get("events", []):
                if event["type"] == "metrics":
                    got.append((now, event["time"], len(event["data"]["values"])))
        producer.wait(timeout=60)
    return got


def run_mlflow(python: Path, points: int, keys: int, work: Path) -> dict | None:
    mlflow = python.parent / "mlflow"
    if not mlflow.exists():
        print(f"peer skipped: MLflow ({mlflow} not found; create it with: python -m venv var/mlflow-venv && "
              "var/mlflow-venv/bin/pip install -r bench/requirements-mlflow.txt)")
        return None
    port = free_port()
    server = spawn([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                    "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
                    "--default-artifact-root", str(work / "mlartifacts")],
                   work / "mlflow.log", {**os.environ, "PATH": f"{python.parent}:{os.environ['PATH']}"})
    try:
        wait_listening(port, server, "mlflow server", timeout=180, log_path=work / "mlflow.log")
        time.sleep(1.0)
        out = subprocess.run([str(python), "-c", MLFLOW_CLIENT, f"http://127.0.0.1:{port}", str(points), str(keys)],
                             capture_output=True, text=True, timeout=900, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stop_processes([server], timeout=15)


def main() -> None:
    if sys.argv[1:2] == ["--produce"]:
        run_id, redis_url, jsonl, steps, keys, first_step, rate = sys.argv[2:9]
        produce(run_id, redis_url, Path(jsonl), int(steps), int(keys), int(first_step), float(rate) or None)
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=100, help="metric keys per event (step)")
    parser.add_argument("--paced-rate", type=float, default=20_000, help="points/s of the latency phase")
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--mlflow-python", type=Path, default=REPO_ROOT / "var" / "mlflow-venv" / "bin" / "python")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): every server and socket, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.points, args.paced_rate, args.paced_seconds = 2_000, 2_000, 1.0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below on `timeout`/kill
    work = Path(tempfile.mkdtemp(prefix="policylab-bench-"))
    redis = start_redis(work, free_port())
    processes: list[subprocess.Popen] = []
    try:
        database_url = args.database_url or f"sqlite:///{work / 'bench.sqlite3'}"
        run, cookie = setup_django(database_url, redis.address, work)
        env = server_env()
        daphne, port = start_daphne(env, work)
        ingest = spawn([sys.executable, str(REPO_ROOT / "manage.py"), "ingest_events"], work / "ingest.log", env)
        processes += [daphne, ingest]
        servers = {"ingest_events": ingest, "daphne": daphne}
        ws_url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/"

        jsonl = run.run_dir / "events.jsonl"

        def start(steps: int, first_step: int, rate: float | None):
            return lambda: producer_process(run.trainer_run_id, redis.address, jsonl, steps, args.keys, first_step, rate)

        asyncio.run(receive(ws_url, cookie, 1, start(1, 0, None), timeout=30))  # warm up: stream discovered
        # 1. throughput
        steps = args.points // args.keys
        t0, cpu_before = time.time(), cpu_seconds(servers)
        got = asyncio.run(receive(ws_url, cookie, steps, start(steps, 1, None), timeout=300))
        cpu = {name: used - cpu_before[name] for name, used in cpu_seconds(servers).items()}
        points = sum(n for *_, n in got)
        elapsed = max(r for r, _, _ in got) - t0
        rate = points / elapsed
        from policylab.tracking.models import MetricPoint

        stored = MetricPoint.objects.filter(run=run).count()

        # 2. latency at a paced rate
        paced_steps = int(args.paced_rate * args.paced_seconds / args.keys)
        paced = asyncio.run(receive(ws_url, cookie, paced_steps, start(paced_steps, steps + 1, args.paced_rate),
                                    timeout=args.paced_seconds + 60))
        latencies = [(r - e) * 1000 for r, e, _ in paced]

        print(f"PolicyLab ingest ({'SQLite' if database_url.startswith('sqlite') else 'PostgreSQL'}), "
              f"{args.keys} keys per event:")
        print(f"  throughput: {points} points received over the websocket in {elapsed:.2f} s = {rate:,.0f} points/s "
              f"(stored rows: {stored})")
        print("  CPU per 1,000 points: " + ", ".join(f"{name} {1e6 * s / points:.1f} ms" for name, s in cpu.items())
              + f"; all together {1e6 * sum(cpu.values()) / points:.1f} ms = at most "
              f"{(os.cpu_count() or 1) * points / sum(cpu.values()):,.0f} points/s on {os.cpu_count()} cores "
              f"(load average {os.getloadavg()[0]:.1f})")
        print(f"  latency at {args.paced_rate:,.0f} points/s, emit -> websocket receipt, {len(latencies)} events: "
              f"p50 {statistics.median(latencies):.0f} ms, p99 {percentile(latencies, 0.99):.0f} ms")

        # 3. MLflow
        mlflow = run_mlflow(args.mlflow_python, args.points, args.keys, work)
        if mlflow:
            mlflow_rate = mlflow["points"] / mlflow["seconds"]
            print(f"MLflow log_batch (local tracking server, SQLite backend): {mlflow['points']} points in "
                  f"{mlflow['seconds']:.2f} s = {mlflow_rate:,.0f} points/s (stored: {mlflow['stored']})")
            print(f"ratio PolicyLab / MLflow throughput: {rate / mlflow_rate:.1f}x")
    finally:
        stop_processes(processes, timeout=10)
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
