"""Fault injection across the whole platform (issue 20), shared by tests/faults and bench/faults.py.

The stack is `scripts/run_platform.py --nodes 2 --no-demo`, what `scripts/run.sh --nodes 2` runs, in a
subprocess on the caller's database: its own Redis, a Ray head and a second Ray node, a Celery worker and
beat, the telemetry ingest consumer and the web server, each started again by the platform's restart
policy when it exits (scripts/services.Platform.restart_dead). Every fault is injected at a random step
of a real run (the demo's tiny GRPO, actor_train on the head, actor_infer on the second node) launched
through the REST API; the run is followed to its end and checked against its run directory:

- outcome: the run's verdict (succeeded, auto-resumed from its latest checkpoint where the trainer died,
  or failed with a one-line reason) and its attempts;
- lost: metric points the run directory's events.jsonl holds that the API's full-resolution export lacks,
  plus steps 1..last without any metric point (holes); duplicated: points the series API returns twice
  for one (key, step); a stored value that is not the run directory's last word for its (key, step) is
  a problem too;
- the rollouts the API lists equal the run directory's (latest sample per step, group and index), and the
  checkpoints it lists as on disk are exactly the checkpoint folders on disk;
- the run page (server-rendered) and the API agree on status, step and message;
- time to recover: from the injection until the platform works end to end again: the API answers through
  the web server, it shows a step beyond the one at the fault (or the run's end), a supervisor holds the
  run (another one where the fault killed its supervisor), and, where the trainer died, a new attempt runs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.services import REPO_ROOT, Service, _spawn, free_port, process_tree, ray_headers, service_env

DEMO = REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"
NODES = 2
DEVICES_PER_NODE = 4  # scripts.services.cpus_per_node(2): devices 0-3 on the head, 4-7 on the second node
MAX_STEPS = 120
SAVE_STEPS = 20
# The demo, short: actor_train on the head (device 0), actor_infer on the second node (device 4). Two PPO
# epochs make actor_train recompute the old log-probs, so every step reports rollout/logprob_diff_max: the
# engine's log-probs against the trainer's, ~0 only while weight sync across the nodes works.
RUN_OVERRIDES = [
    f"max_steps={MAX_STEPS}", f"save_steps={SAVE_STEPS}", "eval_steps=0", "rollout_batch_size=4",
    "num_return_sequences_in_group=2", "actor_train.training_args.per_device_train_batch_size=8", "ppo_epochs=2",
    "actor_train.data_args.synthetic.num_prompts=64", "val_batch_size=8",
    f"num_gpus_per_node={DEVICES_PER_NODE}", f"actor_infer.device_mapping=[{DEVICES_PER_NODE}]",
]
# Two ranks of actor_train in one gloo group, whose collectives give up after 6 s (a hung rank).
HANG_OVERRIDES = (
    "actor_train.device_mapping=[0,1]", "actor_train.strategy_args.strategy_name=fsdp2_train",
    "actor_train.training_args.per_device_train_batch_size=4", "actor_train.backend_timeout=0.1",
)
# Supervision as the jobs tests run it: a dead supervisor's run is taken over within seconds.
STACK_SETTINGS = {
    "POLICYLAB_SUPERVISOR_POLL_S": "0.5",
    "POLICYLAB_SUPERVISOR_LOCK_TTL_S": "5",
    "POLICYLAB_RECONCILE_INTERVAL_S": "2",
    "POLICYLAB_MAX_RETRIES": "2",
}
TERMINAL = {"succeeded", "failed", "cancelled"}
SYNCED = 1e-3  # rollout/logprob_diff_max above this: the engine generated with other weights than the trainer's


# The session's seed and results, here rather than in conftest.py: pytest imports that file under another
# module name than the tests would, so state kept there would be two lists.
# POLICYLAB_FAULT_SEED=<n> repeats a session's injection points.
SEED = int(os.environ.get("POLICYLAB_FAULT_SEED") or random.SystemRandom().randrange(1_000_000))
ROWS: list[Row] = []
LOCKED: list[tuple[str, int]] = []  # (database engine, "database is locked" lines in the stack's service logs)


class FaultError(RuntimeError):
    """The stack or a run did not do what the harness waits for, in time."""


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise FaultError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def argv_of(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


# --- the stack -------------------------------------------------------------------------------------------

class Stack:
    """scripts/run_platform.py --nodes 2 on `database_url`, with its own ports, Redis, runs and logs under
    `work`; `restart()` stops it (SIGTERM, as Ctrl-C of run.sh) and starts it again on the same ports."""

    def __init__(self, work: Path, database_url: str, *, secret_key: str) -> None:
        self.work = work
        self.runs_dir = work / "runs"
        self.logs_dir = work / "var" / "logs"
        self.web_port, redis_port, ray_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.ray_address = f"http://127.0.0.1:{ray_port}"
        self.ray_token_path = work / "var" / "ray_auth_token"  # run_platform's Ray demands it (decision 0047)
        self.env = service_env({
            "DATABASE_URL": database_url,
            "REDIS_URL": self.redis_url,
            "CELERY_BROKER_URL": self.redis_url,
            "CELERY_RESULT_BACKEND": self.redis_url,
            "RAY_ADDRESS": self.ray_address,
            "POLICYLAB_RAY_AUTH_TOKEN_PATH": str(self.ray_token_path),
            "POLICYLAB_RUNS_DIR": str(self.runs_dir),
            "POLICYLAB_VAR_DIR": str(work / "var"),
            "DJANGO_SECRET_KEY": secret_key,  # the caller's sessions hold on the web server
            **STACK_SETTINGS,
        })
        self.platform: Service | None = None
        self.starts = 0

    def start(self, timeout: float = 240.0) -> None:
        self.starts += 1
        log = self.work / f"run_platform-{self.starts}.log"
        argv = [sys.executable, "-u", str(REPO_ROOT / "scripts" / "run_platform.py"), "--no-demo",
                "--nodes", str(NODES), "--port", str(self.web_port)]
        self.platform = _spawn("run_platform", argv, log, self.url, self.env)
        platform = self.platform

        def up() -> bool:
            if not platform.alive():
                raise FaultError(f"run_platform exited ({platform.process.returncode}):\n{platform.log_tail(40)}")
            return "PolicyLab is up" in log.read_text(errors="replace")

        wait_for(up, timeout, "run_platform to report the platform up", interval=0.5)

    def stop(self) -> None:
        """SIGTERM to run_platform (it stops what it started), SIGKILL to whatever is left after 60 s."""
        if self.platform is not None:
            self.platform.stop(timeout=60.0)
            self.platform = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def processes(self) -> dict[int, list[str]]:
        """pid -> argv of every process of the stack (services, Ray's processes, job drivers, actors)."""
        if self.platform is None:
            return {}
        return {pid: argv for pid, _ in process_tree(self.platform.process.pid) if (argv := argv_of(pid))}

    def pid_of(self, what: str, match: Callable[[list[str]], bool]) -> int:
        found = [pid for pid, argv in self.processes().items() if match(argv)]
        if len(found) != 1:
            raise FaultError(f"expected one {what} process in the stack, found {found}")
        return found[0]

    def log_count(self, needle: str) -> int:
        """Occurrences of `needle` in every service log of the stack (all its starts)."""
        return sum(path.read_text(errors="replace").count(needle) for path in self.logs_dir.glob("*.log"))


def is_celery(kind: str) -> Callable[[list[str]], bool]:
    """Celery retitles its processes ("[celeryd: worker@host:MainProcess] -active- (-A policylab worker …)"),
    which rewrites their /proc cmdline: match words of the whole line."""
    return lambda argv: "celery" in " ".join(argv) and kind in " ".join(argv).split()


def is_manage(command: str) -> Callable[[list[str]], bool]:
    return lambda argv: any(a.endswith("manage.py") for a in argv) and command in argv


def is_daphne(argv: list[str]) -> bool:
    return "daphne" in argv


def is_redis(argv: list[str]) -> bool:
    return bool(argv) and "redis-server" in argv[0]


def is_second_node(argv: list[str]) -> bool:
    return "start" in argv and "--block" in argv and "--head" not in argv and any(
        a.startswith("--address=") for a in argv)


# --- the platform, as a user reaches it -----------------------------------------------------------------

class Unreachable(RuntimeError):
    pass


@dataclass
class Client:
    """The REST API with a team's token, and the run page with a session cookie of the same user."""

    url: str
    token: str
    session_cookie: str

    def request(self, path: str, body: dict | None = None, *, page: bool = False) -> Any:
        headers = {"Cookie": self.session_cookie} if page else {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code >= 500:
                raise Unreachable(f"{path}: HTTP {error.code}") from error
            raise FaultError(f"{path}: HTTP {error.code}: {error.read().decode()[:500]}") from error
        except (OSError, urllib.error.URLError) as error:
            raise Unreachable(f"{path}: {error}") from error
        return text if page else json.loads(text)

    def get(self, path: str) -> Any:
        return self.request(path)

    def run(self, run_id: int) -> dict:
        return self.get(f"/api/runs/{run_id}/")

    def page_state(self, run_id: int) -> dict[str, str]:
        """Status, step, total and message as the run page renders them on the server."""
        html = self.request(f"/runs/{run_id}/", page=True)
        state = {}
        for name, element in (("status", "run-state"), ("step", "run-step"), ("total", "run-total"),
                              ("message", "run-message")):
            found = re.search(rf'id="{element}"[^>]*>(.*?)</', html, re.S)
            if found is None:
                raise FaultError(f"run page of run {run_id} has no #{element}")
            state[name] = unescape(found[1].strip())
        return state

    def paged(self, path: str) -> list[dict]:
        items, page = [], 1
        while True:
            body = self.get(f"{path}{'&' if '?' in path else '?'}page={page}&page_size=500")
            items += body["results"]
            if not body.get("next"):
                return items
            page += 1


def unescape(text: str) -> str:
    import html

    return html.unescape(text)


def tenant(username: str) -> tuple[Any, Any, Any]:
    """A user, a team of theirs and a project in it, made through the ORM on the stack's database."""
    from django.contrib.auth import get_user_model

    from policylab.accounts.models import Membership, Role, Team
    from policylab.experiments.models import Project

    user = get_user_model().objects.create_user(username, password=f"pw-{username}-{os.getpid()}")
    team = Team.objects.create(name=f"Faults {username}", slug=username)
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    return user, team, Project.objects.create(team=team, name="faults")


def client_for(stack: Stack, user: Any, team: Any) -> Client:
    from django.conf import settings
    from django.test import Client as DjangoClient

    from policylab.accounts.services import create_api_token

    django_client = DjangoClient()
    django_client.force_login(user)
    cookie = django_client.cookies[settings.SESSION_COOKIE_NAME]
    return Client(stack.url, create_api_token(user, team, "faults").secret, f"{cookie.key}={cookie.value}")


# --- faults -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[Stack, int], str]  # (stack, run id) -> what was done
    # None: the trainer must run on undisturbed (one attempt); else the run must be resumed from a checkpoint
    # by a new attempt, and the first attempt's message must match this (the reason, clearly)
    first_attempt_says: str | None = None
    overrides: tuple[str, ...] = ()
    takes_over: bool = False  # the run's supervisor dies with the fault: recovered once another holds the run
    # what else the platform must show for this fault: (client, run id) -> problems
    check: Callable[[Client, int], list[str]] | None = None


def sigkill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_service(what: str, match: Callable[[list[str]], bool]) -> Callable[[Stack, int], str]:
    def inject(stack: Stack, run_id: int) -> str:
        pid = stack.pid_of(what, match)
        sigkill([pid])
        return f"kill -9 {pid} ({what})"

    return inject


def driver_pids(stack: Stack, run_id: int) -> list[int]:
    config = str(stack.runs_dir / f"run-{run_id}" / "config.yaml")
    return [pid for pid, argv in stack.processes().items() if "trainer" in argv and config in argv]


def kill_driver(stack: Stack, run_id: int) -> str:
    pids = wait_for(lambda: driver_pids(stack, run_id), 30, f"the trainer process of run {run_id}")
    sigkill(pids)
    return f"kill -9 {pids} (the Ray job's driver: the trainer)"


def ray_state(stack: Stack, resource: str, limit: int = 1000) -> list[Any]:
    """The live entries of Ray's state API (`actors`, `nodes`), asked with the cluster's token."""
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource

    headers = {"Content-Type": "application/json", **ray_headers(stack.ray_token_path)}
    client = StateApiClient(address=stack.ray_address, headers=headers)
    options = ListApiOptions(filters=[("state", "=", "ALIVE")], detail=True, limit=limit)
    return list(client.list(StateResource(resource), options=options, raise_on_missing_output=True))


def actor(stack: Stack, repr_name: str) -> Any:
    alive = ray_state(stack, "actors")
    found = [a for a in alive if a.repr_name == repr_name]
    if len(found) != 1:
        raise FaultError(f"expected one live actor {repr_name!r}, found {[(a.repr_name, a.pid) for a in alive]}")
    return found[0]


def kill_actor(stack: Stack, run_id: int) -> str:
    target = actor(stack, "actor_train:0")
    sigkill([target.pid])
    return f"kill -9 {target.pid} (Ray actor actor_train:0 on node {target.node_id[:8]})"


def kill_second_node(stack: Stack, run_id: int) -> str:
    node = stack.pid_of("second Ray node", is_second_node)
    members = sorted(pid for pid, _ in process_tree(node))
    sigkill(members)
    return f"kill -9 of the second Ray node's {len(members)} processes (raylet, workers, actor_infer)"


def restart_everything(stack: Stack, run_id: int) -> str:
    stack.restart()
    return "run_platform stopped (SIGTERM) and started again"


def hang_a_rank(stack: Stack, run_id: int) -> str:
    target = actor(stack, "actor_train:1")
    os.kill(target.pid, signal.SIGSTOP)  # stops answering mid-collective; its group's timeout is 6 s
    return f"SIGSTOP {target.pid} (actor_train rank 1, in the middle of its collectives)"


def stop_actor_infer(stack: Stack, run_id: int) -> str:
    target = actor(stack, "actor_infer:0")
    os.kill(target.pid, signal.SIGSTOP)  # a rollout that never returns; no collective to time it out
    return f"SIGSTOP {target.pid} (actor_infer rank 0: the rollout engine stops answering)"


STALL_BOUND_S = 5.0
# the watchdog bounds the engine's phases at 5 s and restarts the run from its latest checkpoint
STALL_OVERRIDES = (f"watchdog.phase_timeout_s={{generate: {STALL_BOUND_S:g}, weight_sync: {STALL_BOUND_S:g}}}",
                   "watchdog.poll_s=0.5", "watchdog.on_stall=restart_from_checkpoint")


def stall_shown(client: Client, run_id: int) -> list[str]:
    """The first attempt's stall, as the API's run detail shows it: the engine's phase, reported within twice
    its bound, naming actor_infer rank 0, with the stopped process's stack."""
    stalls = [s for s in client.run(run_id).get("stalls", []) if s["attempt"] == 1]
    if len(stalls) != 1:
        return [f"expected one stall of attempt 1, the API lists {len(stalls)}"]
    stall, problems = stalls[0], []
    if stall["phase"] not in ("generate", "weight_sync") or stall["elapsed_s"] > 2 * STALL_BOUND_S:
        problems.append(f"stall in {stall['phase']} after {stall['elapsed_s']} s (bound {STALL_BOUND_S} s)")
    if not any(w["role"] == "actor_infer" and w["ranks"] == [0] for w in stall["waiting"]):
        problems.append(f"the stall names {stall['waiting']}, not actor_infer rank 0")
    if "actor_infer rank 0" not in stall["stacks"] or "Thread" not in stall["stacks"]:
        problems.append("the stall's stacks hold no stack of actor_infer rank 0")
    return problems


def nothing(stack: Stack, run_id: int) -> str:
    return "nothing (the peer every other row's run time is compared with)"


UNDISTURBED = "none (undisturbed run)"
SECOND_NODE = "kill -9 second Ray node"  # in test_two_nodes.py, with Ray's records of where roles ran
FAULTS = [
    Fault(UNDISTURBED, nothing),
    Fault("kill -9 Celery worker", kill_service("Celery worker", is_celery("worker")), takes_over=True),
    Fault("kill -9 Ray driver (trainer)", kill_driver, r"exit code (-9|137)"),  # 137: 128 + SIGKILL, via the shell
    # killed mid-step the actor's own call fails ("Actor died…"); killed while actor_infer fetches the weights
    # it published, that fetch names it as their producer ("full_state_dict failed: its result was lost")
    Fault("kill -9 worker actor", kill_actor, r"role 'actor_train' rank 0: \w+ failed: (Actor|its result was lost)"),
    Fault(SECOND_NODE, kill_second_node, r"role 'actor_infer' rank 0: \w+ failed: |exit code 1\b"),
    Fault("kill -9 ingest consumer", kill_service("ingest consumer", is_manage("ingest_events"))),
    Fault("kill -9 web server", kill_service("web server", is_daphne)),
    Fault("restart of Redis (kill -9)", kill_service("Redis", is_redis)),
    Fault("full restart (run_platform)", restart_everything, r"vanished from the cluster", takes_over=True),
    Fault("hung collective (SIGSTOP rank)", hang_a_rank,
          r"role 'actor_train' rank 0: \w+ failed: .*Timed out.*ranks \[1\] had not answered", HANG_OVERRIDES),
    Fault("stalled rollout (SIGSTOP actor_infer)", stop_actor_infer,
          r"Stalled: phase (generate|weight_sync) has run .*waiting on actor_infer rank 0", STALL_OVERRIDES,
          check=stall_shown),
]


# --- one fault, one run -------------------------------------------------------------------------------

@dataclass
class Row:
    fault: str
    run_id: int
    injected_at_step: int
    action: str
    status: str = ""
    outcome: str = ""
    attempts: list[dict] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)  # per later attempt: the step it resumed after
    lost: int = 0
    duplicated: int = 0
    recover_s: float = math.nan
    duration_s: float = math.nan  # launch to verdict
    problems: list[str] = field(default_factory=list)


def launch(client: Client, experiment_id: int, overrides: tuple[str, ...]) -> int:
    return int(client.request(f"/api/experiments/{experiment_id}/runs/", {"overrides": list(overrides)})["id"])


def current(client: Client, run_id: int) -> dict | None:
    with contextlib.suppress(Unreachable):
        return client.run(run_id)
    return None


def supervisor_token(stack: Stack, run_id: int) -> bytes | None:
    """The token of the supervisor lock on the run (each holder's own), None when no supervisor holds it."""
    import redis

    from policylab.jobs.locks import lock_key

    with contextlib.suppress(redis.RedisError), redis.Redis.from_url(stack.redis_url, socket_timeout=2) as server:
        return server.get(lock_key(run_id))
    return None


def run_fault(stack: Stack, client: Client, experiment_id: int, fault: Fault, rng: random.Random,
              log: Callable[[str], None] = print, *,
              observe: Callable[[str, Stack, int], None] = lambda phase, stack, run_id: None) -> Row:
    """Launch a run, inject `fault` at a random step after its first checkpoint, follow it to its end and
    check what the platform holds against the run directory. `observe(phase, stack, run_id)` is called
    just before the injection ("before") and once the platform has recovered ("recovered")."""
    target = rng.randint(SAVE_STEPS + 1, MAX_STEPS * 3 // 5)
    launched = time.monotonic()
    run_id = launch(client, experiment_id, fault.overrides)
    log(f"[faults] {fault.name}: run {run_id}, injecting at step {target}")

    def reached() -> dict | None:
        state = current(client, run_id)
        if state and state["status"] in TERMINAL:
            raise FaultError(f"run {run_id} ended ({state['status']}: {state['message']}) before step {target}")
        return state if state and state["current_step"] >= target else None

    at_fault = wait_for(reached, 240, f"run {run_id} to reach step {target}")["current_step"]
    observe("before", stack, run_id)
    holder = supervisor_token(stack, run_id)
    injected = time.monotonic()
    row = Row(fault.name, run_id, at_fault, fault.inject(stack, run_id))

    def recovered() -> bool:
        """The run is over, or it trains again under a supervisor past the fault's step; where the trainer
        died, in a new attempt."""
        state = current(client, run_id)
        if state is None:
            return False
        if state["status"] in TERMINAL:
            return True
        if fault.first_attempt_says is not None:
            newest = max(state["attempts"], key=lambda a: a["number"], default={"number": 1})
            if newest["number"] < 2 or newest["status"] != "running":
                return False
        token = supervisor_token(stack, run_id)
        return state["current_step"] > at_fault and token is not None and not (fault.takes_over and token == holder)

    try:
        wait_for(recovered, 300, f"run {run_id} to make progress again after: {row.action}", interval=0.2)
    except FaultError as exc:  # CI's log is all the next engineer gets: say where the run stood
        raise FaultError(f"{exc}\n{diagnosis(stack, client, run_id)}") from None
    row.recover_s = time.monotonic() - injected
    observe("recovered", stack, run_id)
    final = wait_for(lambda: (s := current(client, run_id)) and s["status"] in TERMINAL and s, 400,
                     f"run {run_id} to end")
    row.duration_s = time.monotonic() - launched
    row.status = final["status"]
    row.attempts = [{"number": a["number"], "status": a["status"], "message": a["message"]}
                    for a in sorted(final["attempts"], key=lambda a: a["number"])]
    check_run(stack, client, run_id, row)
    if fault.check is not None:
        row.problems += fault.check(client, run_id)
    row.outcome = describe(row, final)
    log(f"[faults] {fault.name}: {row.outcome}; lost {row.lost}, duplicated {row.duplicated}, "
        f"recovered in {row.recover_s:.1f} s{'; PROBLEMS: ' + '; '.join(row.problems) if row.problems else ''}")
    for attempt in row.attempts[:-1]:  # why each retry was needed, in CI's log (the table keeps the counts)
        log(f"[faults]   attempt {attempt['number']} {attempt['status']}: {attempt['message'][-400:]}")
    return row


def diagnosis(stack: Stack, client: Client, run_id: int, lines: int = 25) -> str:
    """Where a run that did not recover stands: the API's view of it (attempts, stalls), the supervisor
    lock, the stack's stopped processes, and the last lines of the run's and the services' logs."""
    state = current(client, run_id) or {}
    out = [f"run {run_id}: status {state.get('status')!r}, step {state.get('current_step')}, "
           f"supervisor lock {'held' if supervisor_token(stack, run_id) else 'free'}"]
    out += [f"  attempt {a['number']} {a['status']}: {str(a.get('message', ''))[-300:]}"
            for a in state.get("attempts", [])]
    out += [f"  stall (attempt {s.get('attempt')}): {s.get('state')} {s.get('summary', '')[:300]}"
            for s in state.get("stalls", [])]
    stopped = [f"{pid} {' '.join(argv)[:120]}" for pid, argv in stopped_processes(stack).items()]
    out.append(f"  stopped processes: {stopped or 'none'}")
    run_dir = stack.runs_dir / f"run-{run_id}"
    for path in sorted([*run_dir.glob("*.log"), *stack.logs_dir.glob("*.log")]):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {path.name} (last {len(tail)} lines)")
        out += [f"  {line[:300]}" for line in tail]
    return "\n".join(out)


def describe(row: Row, final: dict) -> str:
    if row.status != "succeeded":
        return f"{row.status}: {final['message']}"
    if len(row.attempts) == 1:
        return "succeeded, 1 attempt"
    resumed = ", ".join(f"step {s}" for s in row.resumed_from)
    return f"succeeded after {len(row.attempts)} attempts (resumed from {resumed})"


# --- what the platform holds against the run directory ----------------------------------------------------

def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b or (isinstance(a, int | float) and isinstance(b, int | float) and math.isclose(a, b, rel_tol=1e-6))


def truth(run_dir: Path) -> tuple[dict[tuple[str, int], float], dict[tuple[int, int, int], dict], set[int]]:
    """From events.jsonl, the last word (highest seq) per metric (key, step) and per rollout sample, and
    the steps checkpoints were saved at."""
    metrics: dict[tuple[str, int], tuple[int, float]] = {}
    samples: dict[tuple[int, int, int], tuple[int, dict]] = {}
    saved: set[int] = set()
    for event in events(run_dir):
        seq, step = event["seq"], event["step"]
        if event["type"] == "metrics":
            for key, value in event["data"]["values"].items():
                if (key, step) not in metrics or metrics[(key, step)][0] <= seq:
                    metrics[(key, step)] = (seq, value)
        elif event["type"] == "rollouts":
            for sample in event["data"]["samples"]:
                index = (step, sample["group_id"], sample["sample_index"])
                if index not in samples or samples[index][0] <= seq:
                    samples[index] = (seq, sample)
        elif event["type"] == "checkpoint":
            saved.add(event["data"]["step"])
    return {k: v for k, (_, v) in metrics.items()}, {k: s for k, (_, s) in samples.items()}, saved


def api_metrics(client: Client, run_id: int) -> dict[tuple[str, int], float]:
    table = client.get(f"/api/runs/{run_id}/metrics/export/?format=json")
    keys = table["columns"][1:]
    return {(key, row[0]): value for row in table["rows"] for key, value in zip(keys, row[1:], strict=True)
            if value is not None}


def check_run(stack: Stack, client: Client, run_id: int, row: Row) -> None:
    run_dir = stack.runs_dir / f"run-{run_id}"
    metrics, samples, saved = truth(run_dir)
    # ingest may still be storing the last events when the verdict lands: wait until it has them all
    with contextlib.suppress(FaultError):
        wait_for(lambda: metrics.keys() <= api_metrics(client, run_id).keys(), 60, "ingest to catch up", 0.5)
    stored = api_metrics(client, run_id)
    trained = {step for _, step in metrics}
    holes = set(range(1, max(trained, default=0) + 1)) - {step for _, step in stored}
    row.lost = len(metrics.keys() - stored.keys()) + len(holes)
    stale = [pair for pair, value in stored.items() if pair in metrics and not same(value, metrics[pair])]
    extra = stored.keys() - metrics.keys()
    if stale or extra:
        row.problems.append(f"{len(stale)} stored values differ from the run directory's last word, "
                            f"{len(extra)} points it never logged (e.g. {(stale or sorted(extra))[:3]})")
    gaps = {step: value for (key, step), value in metrics.items() if key == "rollout/logprob_diff_max"}
    if len(gaps) < len(trained) or max(gaps.values(), default=0.0) > SYNCED:
        row.problems.append(f"weight sync: rollout/logprob_diff_max logged at {len(gaps)} of {len(trained)} steps, "
                            f"largest {max(gaps.values(), default=math.nan):.2g} (> {SYNCED:g}: out of sync)")
    series = client.get(f"/api/runs/{run_id}/metrics/?max_points=100000")["series"]
    row.duplicated = sum(n - 1 for s in series.values() for n in Counter(s["step"]).values() if n > 1)
    row.duplicated += sum(n - 1 for n in Counter(r[0] for r in client.get(
        f"/api/runs/{run_id}/metrics/export/?format=json")["rows"]).values() if n > 1)

    listed = {(s["step"], s["group_id"], s["sample_index"]): s for s in client.paged(f"/api/runs/{run_id}/rollouts/?")}
    if listed.keys() != samples.keys():
        row.problems.append(f"rollouts: {len(samples.keys() - listed.keys())} missing, "
                            f"{len(listed.keys() - samples.keys())} not in the run directory")
    from policylab.tracking.ingest import storable  # NUL, which databases refuse, is stored as U+FFFD

    differing = [k for k in listed.keys() & samples.keys() if listed[k]["response"] != storable(samples[k]["response"])
                 or not same(listed[k]["reward"], samples[k]["reward"])]
    if differing:
        k = differing[0]
        row.problems.append(f"rollouts: {len(differing)} differ from the run directory (e.g. {k}: API "
                            f"{listed[k]['response']!r}, {listed[k]['reward']}; run dir {samples[k]['response']!r}, "
                            f"{samples[k]['reward']})")

    on_disk = {int(p.name.removeprefix("step_")) for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir()}
    checkpoints = client.paged(f"/api/runs/{run_id}/checkpoints/?")
    listed_on_disk = {c["step"] for c in checkpoints if c["on_disk"]}
    if listed_on_disk != on_disk:
        row.problems.append(f"checkpoints: on disk per the API {sorted(listed_on_disk)}, on disk {sorted(on_disk)}")
    if not saved <= {c["step"] for c in checkpoints}:
        row.problems.append(f"checkpoints saved but not listed: {sorted(saved - {c['step'] for c in checkpoints})}")

    api, page = client.run(run_id), client.page_state(run_id)
    shown = {"status": api["status"], "step": str(api["current_step"]),
             "total": str(api["total_steps"] if api["total_steps"] is not None else "?"), "message": api["message"]}
    if page != shown:
        row.problems.append(f"the run page shows {page}, the API {shown}")

    by_attempt: dict[int, int] = {}
    for event in events(run_dir):
        if event["type"] == "metrics":
            by_attempt.setdefault(event["attempt"], event["step"])
    row.resumed_from = [step - 1 for attempt, step in sorted(by_attempt.items()) if attempt > 1]


# --- the table ---------------------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    """The fault table; "run time" is launch to verdict, and its ratio to the undisturbed run's (the peer,
    same stack and session) when that row is there."""
    peer = next((r.duration_s for r in rows if r.fault == UNDISTURBED), math.nan)
    header = ("fault", "run", "injected at", "outcome", "points lost", "points duplicated", "time to recover",
              "run time (x undisturbed)")
    lines = [[r.fault, str(r.run_id), f"step {r.injected_at_step}", r.outcome, str(r.lost), str(r.duplicated),
              "-" if r.fault == UNDISTURBED else f"{r.recover_s:.1f} s",
              f"{r.duration_s:.0f} s ({r.duration_s / peer:.2f}x)"] for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)] if lines else []
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in lines]
    return "\n".join(out)


def expectations(row: Row, fault: Fault) -> list[str]:
    """What must hold for a row: the reasons it does not (empty: it passes)."""
    failures = list(row.problems)
    if row.status != "succeeded":
        failures.append(f"ended {row.status}, not succeeded: {row.outcome}")
    if row.lost or row.duplicated:
        failures.append(f"{row.lost} points lost, {row.duplicated} duplicated")
    if fault.first_attempt_says is None:
        if len(row.attempts) != 1:
            failures.append(f"the trainer should have run on undisturbed, but attempts are {row.attempts}")
        return failures
    if len(row.attempts) < 2 or not row.resumed_from or min(row.resumed_from) < SAVE_STEPS:
        failures.append(f"not auto-resumed from a checkpoint: attempts {row.attempts}, resumed {row.resumed_from}")
    if row.attempts and not re.search(fault.first_attempt_says, row.attempts[0]["message"], re.S):
        failures.append(f"attempt 1 should say /{fault.first_attempt_says}/, it says {row.attempts[0]['message']!r}")
    return failures


def fault_rng(seed: int, fault: Fault) -> random.Random:
    """The injection point's generator: one per fault, so a fault's step depends only on the seed."""
    return random.Random(f"{seed}:{fault.name}")


def make_experiment(project: Any, user: Any, name: str = "faults") -> int:
    from policylab.experiments import services

    return services.create_experiment(project, name, DEMO.read_text(), user=user, overrides=RUN_OVERRIDES).pk


def stopped_processes(stack: Stack) -> dict[int, list[str]]:
    """pid -> argv of the stack's processes that are stopped (SIGSTOP; state T in /proc/<pid>/stat)."""
    stopped = {}
    for pid, argv in stack.processes().items():
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T":
                stopped[pid] = argv
    return stopped


def cleanup_stopped(stack: Stack) -> None:
    """SIGKILL any process of the stack left stopped (SIGSTOP) by a fault."""
    sigkill(list(stopped_processes(stack)))

