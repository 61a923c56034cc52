"""The driver's watchdog: a phase that overruns its bound is reported, with the stacks that show where.

Every phase of a step (generate, reward, old/ref log-probs, values, updates, weight sync, eval,
checkpoint) runs inside `watchdog.phase(name)`. A daemon thread looks every `poll_s` seconds at the
phases running now and compares each with its bound, learned from the run's own history:

    bound(phase) = phase_timeout_s[phase]                               when the config sets one
                 = max(floor_s, factor × median(last `window` durations))  once the phase ran min_samples times
                 = first_s                                              before that (start-up compiles, loads, warms)

An overrun is reported once (`Stall`: the phase, how long it has run, its bound, the worker ranks that
have not answered, and the Python stacks of the driver and of those ranks), then acted on as
`on_stall` says: `wait` keeps waiting; `fail` and `restart_from_checkpoint` end the attempt (the thread
that runs the pipeline is interrupted; if it does not stop within `grace_s`, the process exits). A stalled phase that
ends after all is reported as recovered, and its duration does not enter the history. A phase that ends while
its stall is being reported (the stacks take a while; a sub-second phase past a tiny bound ends meanwhile) is
reported as recovered right after the stall, never left looking as if the attempt had ended.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config.schema import WatchdogConfig

STALLS_DIR = "stalls"  # in the run directory: one text file per stall, its summary and stacks
STACK_BYTES = 64_000  # per process: a stack dump of a few hundred threads still fits
CLOSE_BEFORE_EXIT_S = 15.0  # the longest a stalled attempt spends closing its event sinks before it exits


class Stalled(BaseException):
    """The attempt ends because a phase stalled (on_stall: fail or restart_from_checkpoint); `retry`
    tells the supervisor whether a new attempt should resume from the last checkpoint. A BaseException,
    like KeyboardInterrupt: raised inside whatever the run's thread was running, it must pass through
    the `except Exception` of the code it interrupts."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def stalled_in(exc: BaseException | None) -> Stalled | None:
    """The Stalled that ended the attempt, where `exc` is it or was caused by it: raised from a signal
    handler while the main thread was inside a C extension's call (Ray's wait), it comes out wrapped in
    a SystemError ("returned a result with an exception set") whose cause it is."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Stalled):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@dataclass(frozen=True)
class Bounds:
    """The config's watchdog section, as numbers (trainer.config.schema.WatchdogConfig)."""

    factor: float = 10.0
    floor_s: float = 60.0
    first_s: float = 1800.0
    window: int = 20
    min_samples: int = 3
    phase_timeout_s: Mapping[str, float] = field(default_factory=dict)


def phase_bound(history: Sequence[float], bounds: Bounds, phase: str) -> float:
    """Seconds `phase` may run before it counts as stalled (the formula in the module docstring)."""
    if phase in bounds.phase_timeout_s:
        return float(bounds.phase_timeout_s[phase])
    recent = list(history)[-bounds.window:]
    if len(recent) < bounds.min_samples:
        return bounds.first_s
    return max(bounds.floor_s, bounds.factor * statistics.median(recent))


@dataclass(frozen=True)
class Waiting:
    """A worker-group call some ranks have not answered: what the watchdog names and dumps."""

    role: str
    method: str
    ranks: tuple[int, ...]
    pids: tuple[int | None, ...]  # the ranks' process ids (None where unknown)


@dataclass(frozen=True)
class Stall:
    phase: str
    elapsed_s: float
    bound_s: float
    thread: str
    waiting: tuple[Waiting, ...]
    stacks: str

    def summary(self) -> str:
        where = "; ".join(f"{w.role} rank{'s' if len(w.ranks) > 1 else ''} {', '.join(map(str, w.ranks))} "
                          f"in {w.method}" for w in self.waiting)
        return (f"phase {self.phase} has run {seconds(self.elapsed_s)}, past its bound of {seconds(self.bound_s)}"
                + (f"; waiting on {where}" if where else f"; in the driver's {self.thread} thread"))


def seconds(value: float) -> str:
    """A duration as read by a person: milliseconds below a second (a 0.04 s phase against a 0.01 s bound
    must not read "0.0 s past 0.0 s"), one decimal below 10 s, whole seconds above."""
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


@dataclass
class _Running:
    phase: str
    thread: str
    started: float
    stall: Stall | None = None
    flagged: bool = False  # check() is reporting a stall of it (under the lock: the report itself is not)
    reported: bool = False  # the stall's report has been made
    ended_after: float | None = None  # set when the phase ended
    ended_by_watchdog: bool = False


class Watchdog:
    """Phases in, stalls out. `waiting()` lists the worker calls not answered yet (the worker groups
    know), `report(stall)` and `recovered(phase, seconds)` tell the run; `act(stall)` is called after
    `report` when on_stall is not `wait`."""

    def __init__(self, bounds: Bounds, *, report: Callable[[Stall], None],
                 recovered: Callable[[str, float], None], waiting: Callable[[], list[Waiting]],
                 act: Callable[[Stall], None] | None = None, poll_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bounds, self.poll_s, self.clock = bounds, poll_s, clock
        self.report, self.recovered, self.waiting, self.act = report, recovered, waiting, act
        self.history: dict[str, deque[float]] = {}
        self.running: dict[int, _Running] = {}  # by id of the phase's scope
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        entry = _Running(name, threading.current_thread().name, self.clock())
        key = id(entry)
        with self.lock:
            self.running[key] = entry
        try:
            yield
        except BaseException as exc:
            entry.ended_by_watchdog = stalled_in(exc) is not None
            raise
        finally:
            elapsed = self.clock() - entry.started
            with self.lock:
                del self.running[key]
                entry.ended_after = elapsed
                if not entry.flagged:
                    self.history.setdefault(name, deque(maxlen=self.bounds.window)).append(elapsed)
                tell = entry.reported  # else check() is still reporting, and tells the recovery after its report
            if tell and not entry.ended_by_watchdog:
                self.recovered(name, elapsed)

    def check(self) -> list[Stall]:
        """Report every running phase past its bound, once; returns the new stalls."""
        now = self.clock()
        with self.lock:
            overdue = [(entry, now - entry.started, bound) for entry in self.running.values()
                       if not entry.flagged
                       and now - entry.started > (bound := phase_bound(self.history.get(entry.phase, ()),
                                                                        self.bounds, entry.phase))]
            for entry, _, _ in overdue:
                entry.flagged = True
        stalls = []
        for entry, elapsed, bound in overdue:
            waiting = tuple(self.waiting())
            stall = Stall(entry.phase, elapsed, bound, entry.thread, waiting,
                          capture_stacks(waiting, driver_thread=entry.thread))
            with self.lock:
                entry.stall = stall
            stalls.append(stall)
            self.report(stall)
            with self.lock:
                entry.reported = True
                ended_after = entry.ended_after
            if ended_after is not None:  # it ended while the stall was reported: it recovered, nothing to act on
                if not entry.ended_by_watchdog:
                    self.recovered(entry.phase, ended_after)
            elif self.act is not None:
                self.act(stall)
        return stalls

    def still_stalled(self, stall: Stall) -> bool:
        with self.lock:
            return any(entry.stall is stall for entry in self.running.values())

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="watchdog", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=self.poll_s + 5)

    def _loop(self) -> None:
        while not self.stop_event.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # a report that failed (a full disk, a closed sink): say so, keep watching
                print(f"watchdog: {traceback.format_exc()}", file=sys.stderr, flush=True)


def capture_stacks(waiting: Sequence[Waiting], driver_thread: str | None = None) -> str:
    """Each waiting rank's process first (py-spy, read without stopping it: it works on a process that is
    itself stopped), its threads that run the trainer's code before Ray's idle ones; then the driver's
    threads, the stalled phase's (`driver_thread`) first. A rank on another node, or without py-spy here, is
    named with the reason its stack is missing."""
    parts = []
    for call in waiting:
        for rank, pid in zip(call.ranks, call.pids, strict=True):
            title = f"== {call.role} rank {rank} in {call.method}"
            if pid is None:
                parts.append(f"{title}\n(no process id known for this rank)")
            elif pid == os.getpid():
                parts.append(f"{title}: in the driver process, see below")
            else:
                parts.append(f"{title} (pid {pid})\n{waiting_first(process_stacks(pid))}")
    parts.append(f"== driver (pid {os.getpid()})\n{driver_stacks(driver_thread)}")
    return "\n\n".join(parts)


def thread_rank(block: str) -> int:
    """Where a thread's stack goes in a dump: 0 runs the trainer's code (what the rank is waiting in), 1 is
    active, 2 is idle (Ray's listener and log threads, a pool's idle workers)."""
    if "trainer/" in block or "trainer\\" in block:
        return 0
    return 1 if "(active" in block.split("\n", 1)[0] else 2


def waiting_first(dump: str) -> str:
    """A py-spy dump ("Process …", "Python …", then one "Thread …" block each) with the threads that run the
    trainer's code first and the idle ones last; anything else (a message instead of a dump) as it is."""
    head, sep, rest = dump.partition("\nThread ")
    if not sep:
        return dump
    blocks = [f"Thread {block}" for block in rest.split("\nThread ")]
    blocks.sort(key=thread_rank)  # stable: py-spy's order within a rank
    return "\n".join([head, *blocks])


def driver_stacks(first: str | None = None) -> str:
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    blocks = []
    for ident, frame in sys._current_frames().items():
        name = names.get(ident, ident)
        if name == "watchdog":
            continue
        block = f"-- thread {name}\n{''.join(traceback.format_stack(frame))}"
        blocks.append((0 if name == first else 1 + thread_rank(block), block))
    blocks.sort(key=lambda ranked: ranked[0])
    return "\n".join(block for _, block in blocks)[:STACK_BYTES]


def py_spy() -> str | None:
    """The py-spy beside this interpreter (the virtualenv's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def process_stacks(pid: int, timeout_s: float = 20.0) -> str:
    tool = py_spy()
    if tool is None:
        return "(py-spy is not installed: no stack for another process)"
    if not os.path.exists(f"/proc/{pid}"):
        return f"(process {pid} is not on this node: its stack is read on the node that runs it)"
    try:
        done = subprocess.run([tool, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"(py-spy did not answer within {timeout_s:g} s)"
    text = done.stdout if done.returncode == 0 else f"(py-spy failed: {done.stderr.strip()[-500:]})"
    return text[-STACK_BYTES:]


class RunThreadInterrupt:
    """Raise `Stalled` in the thread that runs the pipeline (the one that built this), from the watchdog's.

    In the main thread a signal (SIGUSR2) wakes it from a sleep or a bounded wait and the handler raises;
    `close()` puts the previous handler back. In another thread (an in-process caller: a test, a notebook),
    where no signal handler can be set, CPython's asynchronous exception is raised at its next bytecode: a
    worker-group wait returns to Python within a second, a C call that never returns is the grace period's."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self.thread_id: int = self.thread.ident or 0  # the current thread has started: its ident is set
        self.by_signal = self.thread is threading.main_thread()
        self.pending: Stalled | None = None
        self.previous = signal.signal(signal.SIGUSR2, self._handler) if self.by_signal else None

    def _handler(self, signum: int, frame: Any) -> None:
        exc, self.pending = self.pending, None
        if exc is not None:
            raise exc

    def raise_in_run(self, message: str, *, retry: bool) -> None:
        if self.by_signal:
            self.pending = Stalled(message, retry=retry)
            signal.pthread_kill(self.thread_id, signal.SIGUSR2)
            return

        class StalledHere(Stalled):  # the async exception is raised as a class, built without arguments
            def __init__(self) -> None:
                super().__init__(message, retry=retry)

        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread_id), ctypes.py_object(StalledHere))

    def close(self) -> None:
        if self.by_signal:
            signal.signal(signal.SIGUSR2, self.previous)


def end_attempt(watchdog: Watchdog, interrupt: RunThreadInterrupt, stall: Stall, *, retry: bool, grace_s: float,
                exit_code: int, before_exit: Callable[[], None]) -> None:
    """on_stall fail / restart_from_checkpoint: `Stalled` in the run's thread; if the stalled phase is
    still running `grace_s` later (a call that never returns to Python) and the watchdog was not
    stopped, `before_exit()` and leave the process with `exit_code`."""
    then = ("the run resumes from its latest checkpoint in a new attempt" if retry
            else "the attempt fails without a retry")
    message = f"{stall.summary()} (on_stall: {'restart_from_checkpoint' if retry else 'fail'}: {then})"
    interrupt.raise_in_run(message, retry=retry)

    def last_resort() -> None:
        if watchdog.stop_event.wait(grace_s) or not watchdog.still_stalled(stall):
            return
        print(f"training failed: Stalled: {message} (the run's thread did not stop within {grace_s:g} s)",
              file=sys.stderr, flush=True)
        # The stalled thread may hold a lock `before_exit` needs (an exception raised into it can leave one
        # taken): closing gets a bounded time of its own, and the process leaves whether or not it finished.
        closing = threading.Thread(target=before_exit, name="watchdog-close", daemon=True)
        closing.start()
        closing.join(CLOSE_BEFORE_EXIT_S)
        os._exit(exit_code)

    threading.Thread(target=last_resort, name="watchdog-exit", daemon=True).start()


def waiting_calls(groups: Mapping[str, Any]) -> list[Waiting]:
    """The worker-group calls in flight now, with the ranks that have not answered and their pids."""
    calls = []
    for role, group in list(groups.items()):
        if group.in_flight is None:  # WorkerGroup and LocalWorkerGroup both keep it
            continue
        method, ranks = group.in_flight
        pids = tuple(group.pids[r] if r < len(group.pids) else None for r in ranks)
        calls.append(Waiting(role, method, ranks, pids))
    return calls


def bounds_of(config: WatchdogConfig) -> Bounds:
    return Bounds(factor=config.factor, floor_s=config.floor_s, first_s=config.first_s, window=config.window,
                  min_samples=config.min_samples, phase_timeout_s=dict(config.phase_timeout_s))


def start_watchdog(config: WatchdogConfig, emitter: Any, groups: Mapping[str, Any], run_dir: Path, *,
                   log: Callable[[str], None], exit_codes: Mapping[bool, int]) -> tuple[Watchdog, RunThreadInterrupt]:
    """The run's watchdog, started: a stall becomes a `stall` event (summary, ranks, stacks) and a file
    under <run_dir>/stalls/, and ends the attempt when on_stall says so (`exit_codes[retry]` is the
    process's exit code when the run's thread cannot be stopped). Call from the thread that runs the pipeline."""
    interrupt = RunThreadInterrupt()
    counter = iter(range(1, 1_000_000))

    def report(stall: Stall) -> None:
        path = run_dir / STALLS_DIR / f"attempt-{emitter.attempt}-stall-{next(counter)}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{stall.summary()}\n\n{stall.stacks}\n", encoding="utf-8")
        emitter.stall({
            "state": "stalled", "phase": stall.phase, "elapsed_s": round(stall.elapsed_s, 3),
            "bound_s": round(stall.bound_s, 3), "summary": stall.summary(), "on_stall": config.on_stall,
            "waiting": [{"role": w.role, "method": w.method, "ranks": list(w.ranks)} for w in stall.waiting],
            "stacks": stall.stacks, "file": str(path.relative_to(run_dir)),
        })
        log(f"watchdog: {stall.summary()} (stacks: {path})")

    def recovered(phase: str, elapsed: float) -> None:
        emitter.stall({"state": "recovered", "phase": phase, "elapsed_s": round(elapsed, 3)})
        log(f"watchdog: phase {phase} ended after {seconds(elapsed)}")

    def act(stall: Stall) -> None:
        retry = config.on_stall == "restart_from_checkpoint"
        end_attempt(watchdog, interrupt, stall, retry=retry, grace_s=config.grace_s, exit_code=exit_codes[retry],
                    before_exit=emitter.close)

    watchdog = Watchdog(bounds_of(config), report=report, recovered=recovered,
                        waiting=lambda: waiting_calls(groups), act=None if config.on_stall == "wait" else act,
                        poll_s=config.poll_s)
    watchdog.start()
    return watchdog, interrupt
