"""The driver's watchdog (trainer.pipeline.run.watchdog): bounds learned from the run's own phases, a stall
reported once with the ranks not answering and the stack of the stuck function, and on_stall acted on."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import events, load_cfg, run_local
from trainer.pipeline.run.watchdog import Bounds, Stall, Waiting, Watchdog, phase_bound, waiting_calls


def test_the_bound_is_the_override_else_the_learned_median_else_the_first_bound() -> None:
    bounds = Bounds(factor=10, floor_s=5, first_s=100, window=4, min_samples=3, phase_timeout_s={"eval": 7})
    assert phase_bound([1.0, 2.0], bounds, "generate") == 100  # too few samples yet
    assert phase_bound([1.0, 2.0, 3.0], bounds, "generate") == 20  # 10 × median 2
    assert phase_bound([0.1, 0.2, 0.1], bounds, "generate") == 5  # the floor
    assert phase_bound([50.0, 1.0, 1.0, 2.0, 2.0], bounds, "generate") == 15  # the last 4: median 1.5
    assert phase_bound([1.0, 1.0, 1.0], bounds, "eval") == 7


def test_one_slow_outlier_does_not_stretch_the_bound() -> None:
    """The bound follows the typical duration (the median), not the mean an outlier drags up: with
    [1, 1, 1, 50] s the phase takes 1 s, so factor 10 gives 10 s (the mean, 13.25 s, would give 132.5 s)."""
    bounds = Bounds(factor=10, floor_s=5, window=4, min_samples=3)
    assert phase_bound([1.0, 1.0, 1.0, 50.0], bounds, "generate") == 10
    assert phase_bound([1.0, 50.0, 1.0, 1.0], bounds, "generate") == 10  # wherever the outlier falls
    # the shipped defaults (factor 10, floor 60 s): the floor, not 132.5 s
    assert phase_bound([1.0, 1.0, 1.0, 50.0], Bounds(), "generate") == 60


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_overrun_is_reported_once_with_the_waiting_ranks_and_a_recovery_keeps_it_out_of_the_history() -> None:
    clock, reports, recoveries = FakeClock(), [], []
    waiting = [Waiting("actor_infer", "generate", (1,), (None,))]
    dog = Watchdog(Bounds(factor=2, floor_s=1, first_s=50, min_samples=2), report=reports.append,
                   recovered=lambda phase, s: recoveries.append((phase, s)), waiting=lambda: waiting, clock=clock)
    for seconds in (3.0, 5.0):  # history of "generate": median 4 → bound 8
        with dog.phase("generate"):
            clock.now += seconds
    with dog.phase("generate"):
        clock.now += 7.9
        assert dog.check() == []
        clock.now += 0.2
        [stall] = dog.check()
        assert dog.check() == []  # once
        clock.now += 10
    assert reports == [stall] and isinstance(stall, Stall)
    assert (stall.phase, stall.bound_s, stall.waiting) == ("generate", 8.0, tuple(waiting))
    assert "actor_infer rank 1 in generate" in stall.summary() and "past its bound of 8.0 s" in stall.summary()
    assert recoveries == [("generate", pytest.approx(18.1))]
    assert list(dog.history["generate"]) == [3.0, 5.0]  # the stalled run does not teach the bound


def test_the_worker_groups_say_which_ranks_have_not_answered(tmp_path: Path) -> None:
    from trainer.cluster import LocalWorkerGroup

    seen = []

    class Slow:
        def __init__(self, role: str, rank: int, world_size: int) -> None: ...

        def work(self) -> None:
            seen.extend(waiting_calls({"reward": group}))

    group = LocalWorkerGroup(Slow, "reward")
    group.call_all(Slow.work)
    [call] = seen
    assert (call.role, call.method, call.ranks) == ("reward", "work", (0,)) and call.pids[0] is not None
    assert waiting_calls({"reward": group}) == []  # answered


def sleeping_reward(seconds_on_third_call: float):
    """A reward function that takes `seconds_on_third_call` on its third batch (step 3), else none."""
    calls = []

    def score(prompts, responses, samples):
        calls.append(1)
        if len(calls) == 3:
            reward_that_hangs(seconds_on_third_call)
        return [0.0] * len(responses)

    return score


def reward_that_hangs(seconds: float) -> None:
    time.sleep(seconds)


def stall_events(out: Path) -> list[dict]:
    return [e["data"] for e in events(out) if e["type"] == "stall"]


WATCH = ("watchdog.phase_timeout_s={reward: 1.0}", "watchdog.poll_s=0.1", "max_steps=4", "save_steps=2",
         "eval_steps=0")


@pytest.fixture
def hanging_reward(monkeypatch):
    def install(seconds: float) -> None:
        import trainer.roles.reward as reward_role

        monkeypatch.setattr(reward_role, "build_reward_fn", lambda cfg, judge_server=None: sleeping_reward(seconds))
    return install


def test_a_reward_that_sleeps_past_its_bound_is_reported_with_its_stack_and_on_stall_fail_ends_the_attempt(
        tmp_path: Path, hanging_reward) -> None:
    hanging_reward(3600)
    out = tmp_path / "run"
    started = time.monotonic()
    code = run_local(load_cfg(out, *WATCH, "watchdog.on_stall=fail"))
    assert code == 3 and time.monotonic() - started < 60  # EXIT_STALLED, long before the hour
    [stall] = stall_events(out)
    assert stall["state"] == "stalled" and stall["phase"] == "reward" and stall["on_stall"] == "fail"
    assert stall["waiting"] == [{"role": "reward", "method": "score", "ranks": [0]}]
    assert "reward_that_hangs" in stall["stacks"]  # the stack names the stuck function
    assert (out / stall["file"]).read_text().startswith("phase reward has run")
    [failed] = [e["data"] for e in events(out, "status") if e["data"]["state"] == "failed"]
    assert failed["message"].startswith("Stalled: phase reward has run") and "without a retry" in failed["message"]


def test_on_stall_fail_ends_a_run_that_an_in_process_caller_runs_in_another_thread(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Off the main thread no signal handler can be set (a test or a notebook runs the trainer in a thread):
    the watchdog raises Stalled there as CPython's asynchronous exception, at the reward's next bytecode."""
    import threading

    import trainer.roles.reward as reward_role

    def score(prompts, responses, samples):
        if score.calls == 2:
            for _ in range(36_000):  # an hour, in Python: the asynchronous exception lands between sleeps
                time.sleep(0.1)
        score.calls += 1
        return [0.0] * len(responses)

    score.calls = 0
    monkeypatch.setattr(reward_role, "build_reward_fn", lambda cfg, judge_server=None: score)
    out, result = tmp_path / "run", {}
    thread = threading.Thread(target=lambda: result.update(code=run_local(load_cfg(out, *WATCH, "watchdog.on_stall=fail"))))
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive() and result["code"] == 3
    [stall] = stall_events(out)
    assert stall["phase"] == "reward" and "in score" in stall["summary"]


def test_on_stall_wait_reports_the_stall_and_its_end_and_the_run_goes_on(tmp_path: Path, hanging_reward) -> None:
    hanging_reward(2.5)
    out = tmp_path / "run"
    assert run_local(load_cfg(out, *WATCH)) == 0
    stalled, recovered = stall_events(out)
    assert (stalled["state"], recovered["state"], recovered["phase"]) == ("stalled", "recovered", "reward")
    assert recovered["elapsed_s"] >= 2.5
    assert json.loads((out / "events.jsonl").read_text().splitlines()[-1])["data"]["state"] == "succeeded"


@pytest.mark.parametrize("role", ["actor_infer", "actor_train"])
def test_a_worker_stopped_with_sigstop_is_named_with_its_stack_and_the_restart_resumes_exactly(
        tmp_path: Path, ray_cluster: None, role: str) -> None:
    """Ray actors, as the platform runs them: the rollout engine's process (a rollout that never returns)
    or the trained policy's is stopped (SIGSTOP) after step 2's checkpoint. The watchdog reports the stuck phase within
    2× its bound, naming that role's rank 0 and its stack (read by py-spy from the stopped process);
    on_stall restart_from_checkpoint ends the attempt for a retry, and the retry (what the platform's
    supervisor starts: resume from the latest checkpoint) finishes the run with no prompt lost or trained
    twice."""
    import os
    import re
    import signal
    import threading

    from trainer.pipeline.run.ledger import LEDGER_FILE, account, read_ledger
    from trainer.pipeline.runner import RunIdentity, run_training

    out = tmp_path / "run"
    bound = 4.0
    phases = ", ".join(f"{phase}: {bound}" for phase in ("generate", "reward", "old_log_probs", "advantages",
                                                         "actor_update", "weight_sync", "checkpoint"))
    watch = (f"watchdog.phase_timeout_s={{{phases}}}", "watchdog.poll_s=0.2",
             "watchdog.on_stall=restart_from_checkpoint", "max_steps=4", "save_steps=2", "eval_steps=0")
    lines: list[str] = []
    stopped: list[int] = []

    def stop_the_role_after_the_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not stopped:
            pids = [int(m.group(1)) for line in lines if (m := re.search(rf"{role} x1 \(pid (\d+)\)", line))]
            progressed = (out / "events.jsonl").exists() and any(  # step 2's checkpoint saved: a retry resumes
                e["type"] == "checkpoint" and e["data"]["step"] == 2 for e in events(out))
            if pids and progressed:
                os.kill(pids[0], signal.SIGSTOP)
                stopped.append(pids[0])
            time.sleep(0.1)

    stopper = threading.Thread(target=stop_the_role_after_the_first_checkpoint, daemon=True)
    stopper.start()
    code = run_training(load_cfg(out, *watch), RunIdentity("stalled"), backend="ray", log=lines.append)
    stopper.join(timeout=5)
    assert stopped and code == 1  # EXIT_FAILED: the platform retries it
    [stall] = stall_events(out)
    assert stall["elapsed_s"] <= 2 * bound
    assert {"role": role, "ranks": [0]}.items() <= stall["waiting"][0].items()
    assert f"{role} rank 0 in {stall['waiting'][0]['method']} (pid {stopped[0]})" in stall["stacks"]
    assert "Thread" in stall["stacks"].split(f"(pid {stopped[0]})", 1)[1]  # py-spy read the stopped process

    assert run_training(load_cfg(out, *watch, "resume_from_checkpoint=latest"), RunIdentity("stalled"),
                        backend="ray", log=lines.append) == 0
    verdict = account(*read_ledger(out / LEDGER_FILE))
    assert verdict.ok and verdict.finished and verdict.attempts == 2, verdict
    assert (verdict.lost_prompts, verdict.duplicated_prompts) == (0, 0)


def test_a_phase_that_ends_while_its_stall_is_reported_is_reported_as_recovered() -> None:
    """Issue 46: a sub-second phase past a tiny bound ends while the watchdog gathers the waiting ranks and their
    stacks; its stall was left without a recovery (shown as "the attempt ended" on a run that succeeded), and its
    overrun entered the history."""
    import threading

    reports, recoveries = [], []
    release, ended = threading.Event(), threading.Event()
    dog = Watchdog(Bounds(phase_timeout_s={"reward": 0.01}), report=reports.append,
                   recovered=lambda phase, s: recoveries.append((phase, s)), waiting=lambda: ended_meanwhile())

    def ended_meanwhile() -> list[Waiting]:  # the phase ends while its stall is being put together
        release.set()
        assert ended.wait(5)
        return []

    def run_phase() -> None:
        with dog.phase("reward"):
            assert release.wait(5)
        ended.set()

    worker = threading.Thread(target=run_phase)
    worker.start()
    time.sleep(0.05)
    [stall] = dog.check()
    worker.join(5)
    assert reports == [stall]
    assert [phase for phase, _ in recoveries] == ["reward"] and recoveries[0][1] >= 0.05  # once, after the report
    assert "reward" not in dog.history  # the overrun does not teach the bound


def test_sub_second_durations_are_shown_in_milliseconds() -> None:
    stall = Stall("reward", 0.0432, 0.01, "MainThread", (), "")
    assert stall.summary().startswith("phase reward has run 43.2 ms, past its bound of 10 ms")  # was "0.0 s … 0.0 s"
    assert Stall("generate", 12.4, 5.0, "MainThread", (), "").summary().startswith(
        "phase generate has run 12 s, past its bound of 5.0 s")


def test_the_stack_dump_opens_with_the_waiting_ranks_frames_not_rays_idle_threads() -> None:
    from trainer.pipeline.run.watchdog import capture_stacks, waiting_first

    dump = ('Process 4242: ray::ActorWorker.generate\nPython v3.11.2 (/usr/bin/python3.11)\n\n'
            'Thread 4250 (idle): "ray_listen_error_messages"\n    wait (threading.py:320)\n'
            'Thread 4251 (idle): "ray_print_logs"\n    wait (threading.py:320)\n'
            'Thread 4242 (idle): "MainThread"\n    sample_next_tokens (trainer/rollout/hf.py:120)\n'
            '    generate (trainer/roles/rollout.py:40)\n')
    ordered = waiting_first(dump)
    assert ordered.startswith("Process 4242: ray::ActorWorker.generate\nPython v3.11.2")
    threads = [line for line in ordered.splitlines() if line.startswith("Thread ")]
    assert threads[0] == 'Thread 4242 (idle): "MainThread"'  # the frames the rank waits in come first
    assert ordered.count("wait (threading.py:320)") == 2 and "sample_next_tokens" in ordered
    assert waiting_first("(py-spy is not installed: no stack for another process)") == (
        "(py-spy is not installed: no stack for another process)")

    text = capture_stacks([Waiting("actor_infer", "generate", (0,), (None,))], driver_thread="MainThread")
    assert text.index("== actor_infer rank 0 in generate") < text.index("== driver")
    assert text.split("== driver", 1)[1].split("\n")[1] == "-- thread MainThread"  # the phase's thread first


STUCK_CLOSE = """
import sys, threading, time
from types import SimpleNamespace
import trainer.pipeline.run.watchdog as wd

wd.CLOSE_BEFORE_EXIT_S = 0.5
held = threading.Lock()
held.acquire()  # what the stalled thread took and never gives back
watchdog = SimpleNamespace(stop_event=threading.Event(), still_stalled=lambda stall: True)
interrupt = SimpleNamespace(raise_in_run=lambda message, retry: None)  # the run's thread never returns to Python
stall = SimpleNamespace(summary=lambda: "phase generate has run 5.1 s, past its bound of 5.0 s")
wd.end_attempt(watchdog, interrupt, stall, retry=True, grace_s=0.2, exit_code=75, before_exit=held.acquire)
time.sleep(60)
sys.exit(0)
"""


def test_a_stalled_attempt_exits_even_when_closing_its_sinks_hangs() -> None:
    """The last resort leaves the process with the retry exit code although `before_exit` blocks on a lock
    the stalled thread holds: without the bound, the attempt hangs and the platform never starts the next."""
    import subprocess
    import sys

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", STUCK_CLOSE], capture_output=True, text=True, timeout=50,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 75, done.stderr[-2000:]
    assert "the run's thread did not stop within 0.2 s" in done.stderr
    assert time.monotonic() - started < 30
