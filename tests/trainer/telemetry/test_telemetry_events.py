"""Event model, JSONL sink, emitter seq/resume, system sampler, trackers — and no torch import."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.telemetry import EventEmitter, JsonlSink, make_event, open_emitter, read_events
from trainer.telemetry.events import Event
from trainer.telemetry.system import SystemSampler
from trainer.telemetry.trackers import StdoutTracker, build_tracker

SAMPLE = {"prompt": "copy ab\n", "response": "ab", "reward": 1.0, "advantage": 0.5, "prompt_length": 8,
          "response_length": 2, "stop_reason": "eos", "group_id": 0, "sample_index": 3}


def test_telemetry_never_imports_torch() -> None:
    code = ("import sys, trainer.telemetry, trainer.telemetry.redis_stream, trainer.telemetry.system, "
            "trainer.telemetry.trackers; sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_event_json_shape_and_round_trip() -> None:
    event = make_event("metrics", run_id="r-1", attempt=2, seq=17, step=3, data={"values": {"a/b": 1.5}},
                       time=1763800000.123)
    assert json.loads(event.to_json()) == {"v": 1, "type": "metrics", "run_id": "r-1", "attempt": 2, "seq": 17,
                                           "step": 3, "time": 1763800000.123, "data": {"values": {"a/b": 1.5}}}
    assert Event.from_json(event.to_json()) == event
    nan = make_event("metrics", run_id="r", attempt=1, seq=1, step=0, data={"values": {"x": float("nan")}})
    assert json.loads(nan.to_json())["data"]["values"]["x"] is None
    with pytest.raises(ValueError, match=r"event.type: 'metric'; valid: status, metrics"):
        make_event("metric", run_id="r", attempt=1, seq=1, step=0, data={})


def test_emitter_payload_validation(tmp_path: Path) -> None:
    with EventEmitter("r", 1, [JsonlSink(tmp_path / "events.jsonl")]) as emitter:
        emitter.rollouts([{**SAMPLE, "tokens": ["a", "b"]}], step=1)
        emitter.checkpoint(1, str(tmp_path / "ckpt"), 1024, ["model", "optimizer"])
        emitter.log("info", "line one\nline two", step=1)
        with pytest.raises(ValueError, match=r"status.state: 'done'; valid: starting, running"):
            emitter.status("done", step=1)
        with pytest.raises(ValueError, match=r"metrics.values\['loss'\]: 'high' is not a number"):
            emitter.metrics({"loss": "high"}, step=1)
        with pytest.raises(ValueError, match=r"rollouts.samples\[0\]: missing advantage"):
            emitter.rollouts([{k: v for k, v in SAMPLE.items() if k != "advantage"}], step=1)
        with pytest.raises(ValueError, match=r"checkpoint.contents: unknown"):
            emitter.checkpoint(1, "p", 1, ["weights"])
    events = read_events(tmp_path / "events.jsonl")
    assert [e["type"] for e in events] == ["rollouts", "checkpoint", "log"]
    assert [e["seq"] for e in events] == [1, 2, 3]  # rejected payloads consume no seq
    assert events[2]["data"] == {"level": "info", "lines": ["line one", "line two"]}


def test_a_profile_event_names_its_file_and_what_it_holds(tmp_path: Path) -> None:
    data = {"path": str(tmp_path / "profiles" / "step_2" / "critic_rank1_train_step.pt.trace.json.gz"),
            "size_bytes": 5, "role": "critic", "rank": 1, "call": "train_step", "kind": "timeline",
            "format": "chrome_trace_gz"}
    with EventEmitter("r", 1, [JsonlSink(tmp_path / "events.jsonl")]) as emitter:
        emitter.profile({**data, "extra": "dropped"}, step=2)
        with pytest.raises(ValueError, match=r"profile: missing rank"):
            emitter.profile({k: v for k, v in data.items() if k != "rank"}, step=2)
        with pytest.raises(ValueError, match=r"profile: kind 'flame'"):
            emitter.profile({**data, "kind": "flame"}, step=2)
    [event] = read_events(tmp_path / "events.jsonl")
    assert (event["type"], event["step"], event["data"]) == ("profile", 2, data)


def test_seq_continues_across_attempts_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventEmitter("run-a", 1, [JsonlSink(path)]) as first:
        first.status("starting", step=0, total_steps=10)
        for step in range(3):
            first.metrics({"reward/mean": step / 10}, step=step)
    with path.open("a") as f:
        f.write('{"v":1,"type":"metrics","run_id":"run-a","seq":')  # crash mid-write
    with open_emitter(tmp_path, run_id="run-a", attempt=2) as second:
        assert second.seq == 4
        second.status("running", step=3, total_steps=10, eta_s=12.5)
    events = read_events(path)
    assert [(e["seq"], e["attempt"]) for e in events] == [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2)]
    assert [e["seq"] for e in read_events(path, after_seq=3)] == [4, 5]
    assert events[-1]["data"] == {"state": "running", "step": 3, "total_steps": 10, "eta_s": 12.5, "message": ""}


def test_open_emitter_reads_identity_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYLAB_RUN_ID", "env-run")
    monkeypatch.setenv("POLICYLAB_ATTEMPT", "3")
    monkeypatch.delenv("POLICYLAB_EVENTS_REDIS_URL", raising=False)
    with open_emitter(tmp_path) as emitter:
        event = emitter.system(SystemSampler().sample(), step=0)
    assert (event.run_id, event.attempt) == ("env-run", 3)
    monkeypatch.delenv("POLICYLAB_RUN_ID")
    with pytest.raises(ValueError, match=r"run_id: not given and POLICYLAB_RUN_ID is unset"):
        open_emitter(tmp_path)


def test_system_sampler_measures_this_process() -> None:
    sampler = SystemSampler()
    sum(i * i for i in range(300_000))  # burn some CPU
    values = sampler.sample()
    assert values["cpu/percent"] > 0
    assert 0.01 < values["memory/rss_gb"] < 64
    assert all(isinstance(v, float) for v in values.values())


def test_trackers(tmp_path: Path) -> None:
    out = io.StringIO()
    tracker = StdoutTracker(stream=out, keys=["reward/mean", "actor/loss"])
    tracker.log({"reward/mean": 0.51234, "actor/loss": -0.00123, "other": 1.0}, step=12)
    assert out.getvalue() == "step 12 | reward/mean 0.5123 | actor/loss -0.00123\n"
    board = build_tracker("tensorboard", tmp_path)
    board.log({"reward/mean": 0.5}, step=1)
    board.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    try:
        import wandb  # noqa: F401
    except ImportError:
        with pytest.raises(RuntimeError, match=r"track_with: wandb is not installed"):
            build_tracker("wandb", tmp_path)
    with pytest.raises(ValueError, match=r"track_with: unknown tracker 'mlflow'"):
        build_tracker("mlflow", tmp_path)


@pytest.mark.gpu
def test_gpu_values_on_a_gpu_machine() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from trainer.telemetry.system import gpu_values

    block = torch.zeros(256, 1024, 1024, device="cuda")  # 1 GiB of float32
    values = gpu_values()
    assert values["gpu/0/memory_allocated_gb"] >= 0.99
    assert values["gpu/0/memory_used_gb"] >= values["gpu/0/memory_allocated_gb"]
    del block
