"""The resume ledger: hand-written histories it must accept or refuse, and a real async run killed with
SIGKILL at random points and resumed, which must lose and duplicate no prompt."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, REPO_ROOT, cli
from trainer.cli import run_ledger
from trainer.pipeline.run.ledger import Ledger, account, read_ledger

START = {"ev": "start", "mode": "async", "lookahead": 2, "max_staleness": 2, "stale_samples": "drop",
         "max_steps": 4, "position": 0}


def draw(batch: int, size: int = 2, start: int | None = None) -> dict[str, Any]:
    first = (batch - 1) * size if start is None else start
    return {"ev": "draw", "batch": batch, "prompts": list(range(first, first + size)), "from": first,
            "to": first + size}


def gen(batch: int, version: int) -> dict[str, Any]:
    return {"ev": "generate", "batch": batch, "version": version, "samples": 4}


def train(batch: int, staleness: int = 0) -> dict[str, Any]:
    return {"ev": "train", "batch": batch, "step": batch, "version": batch - 1 - staleness,
            "staleness": staleness, "samples": 4}


def resume(step: int, upto: int | None, pending: dict[int, list[int]], position: int) -> dict[str, Any]:
    return {**START, "ev": "resume", "step": step, "upto": upto, "next_batch": step + 1 + len(pending),
            "position": position, "buffer": {}, "pending": {str(j): p for j, p in pending.items()}}


def test_a_killed_and_resumed_async_history_is_whole() -> None:
    records = [START, draw(1), draw(2), gen(1, 0), train(1), draw(3), gen(2, 0),
               {"ev": "checkpoint", "step": 1, "upto": 7},  # saved while batches 2 and 3 were drawn, not trained
               train(2, 1), gen(3, 1), draw(4)]  # then killed: these four are redone after the resume
    records += [resume(1, 7, {2: [2, 3], 3: [4, 5]}, position=6), gen(2, 1), train(2), draw(4), gen(3, 1),
                train(3, 1), gen(4, 2), train(4, 1), {"ev": "end", "step": 4, "left": []}]
    out = account(records)
    assert out.ok, (out.lost, out.duplicated, out.problems)
    assert out.attempts == 2 and out.finished and out.left_in_flight == []
    assert out.rolled_back_steps == [2] and out.rolled_back == {"train": 1, "generate": 1, "draw": 1}
    assert sorted(f.trained_at[0] for f in out.batches.values()) == [1, 2, 3, 4]
    assert (out.lost_prompts, out.duplicated_prompts, out.trained_samples) == (0, 0, 16)


def test_a_record_between_the_snapshot_and_the_checkpoint_marker_is_rolled_back_once() -> None:
    """The driver takes the checkpoint's snapshot (upto = 7 ledger lines), and the rollout thread writes
    batch 3's generation (line 7) before the driver's checkpoint marker (line 8). That generation is not
    in the checkpoint: a resume rolls it back, and batch 3 is generated again after it."""
    records = [START, draw(1), draw(2), gen(1, 0), train(1), draw(3), gen(2, 0),  # lines 0-6: the snapshot
               gen(3, 1),  # line 7, written after the snapshot
               {"ev": "checkpoint", "step": 1, "upto": 7},  # line 8
               train(2, 1), draw(4)]  # lines 9-10, then killed
    records += [resume(1, 7, {2: [2, 3], 3: [4, 5]}, position=6), gen(2, 1), train(2), draw(4), gen(3, 1),
                train(3, 1), gen(4, 2), train(4, 1), {"ev": "end", "step": 4, "left": []}]
    out = account(records)
    assert out.ok, (out.lost, out.duplicated, out.problems)
    # by hand: lines 7-10 are rolled back: gen(3) at 7, train(2) at 9, draw(4) at 10 (the marker is not
    # an event); generations that count: gen(1), gen(2) before the snapshot, gen(2), gen(3), gen(4)
    # after the resume = 5 x 4 samples
    assert out.rolled_back == {"generate": 1, "train": 1, "draw": 1}
    assert out.rolled_back_steps == [2]
    assert out.generated_samples == 20
    assert {j: f.generated for j, f in out.batches.items()} == {1: 1, 2: 2, 3: 1, 4: 1}
    assert (out.trained_samples, out.lost_prompts, out.duplicated_prompts) == (16, 0, 0)


def test_a_checkpoint_that_forgot_an_in_flight_batch_loses_its_prompts() -> None:
    records = [START, draw(1), draw(2), draw(3), gen(1, 0), train(1), {"ev": "checkpoint", "step": 1, "upto": 6}]
    # the buggy resume re-queues batch 2 but not batch 3, and the run goes on to step 4
    records += [resume(1, 6, {2: [2, 3]}, position=6), gen(2, 1), train(2), draw(4), gen(4, 2), train(4, 1)]
    out = account(records)
    assert not out.ok
    assert any("batch 3 never trained" in item for item in out.lost) and out.lost_prompts == 2
    assert any("holds batches [2]" in item for item in out.problems)
    assert any("steps [3] trained no batch" in item for item in out.problems)


@pytest.mark.parametrize(("records", "kind", "count"), [
    ([START, draw(1), gen(1, 0), train(1), train(1)], "duplicated", 2),  # trained twice, no resume between
    ([START, draw(1), draw(2, start=4)], "lost", 2),  # sampler positions [2, 4) skipped
    ([START, draw(1), draw(2, start=1)], "duplicated", 1),  # position 1 drawn again
    ([START, draw(1), draw(1, start=2)], "duplicated", 2),  # batch id drawn twice
])
def test_duplicates_and_gaps_are_counted(records: list[dict[str, Any]], kind: str, count: int) -> None:
    out = account(records)
    assert not out.ok
    assert (out.duplicated_prompts if kind == "duplicated" else out.lost_prompts) == count


def test_staleness_beyond_the_bound_is_refused_when_dropping_and_counted_when_downweighting() -> None:
    history = [draw(1), gen(1, 0), train(1), draw(2), draw(3), gen(2, 0), gen(3, 0), train(2, 1), train(3, 2)]
    dropping = account([{**START, "max_staleness": 1}, *history])
    assert any("staleness 2 > max_staleness 1" in item for item in dropping.problems)
    weighing = account([{**START, "max_staleness": 1, "stale_samples": "downweight"}, *history])
    assert weighing.ok and weighing.downweighted_samples == 4


def test_a_fork_starts_from_the_parent_checkpoint(tmp_path: Path) -> None:
    records = [resume(3, None, {4: [8, 9]}, position=10), gen(4, 3), train(4), draw(5, start=10), gen(5, 4),
               {**train(5), "step": 5}, {"ev": "end", "step": 5, "left": []}]
    out = account(records)
    assert out.ok, (out.lost, out.duplicated, out.problems)
    assert out.inherited_steps == 3 and sorted(out.batches) == [4, 5]


def test_a_torn_last_line_is_closed_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (START, draw(1), gen(1, 0))) + '\n{"ev": "tra')
    ledger = Ledger(path)  # a writer after a machine crash mid-record
    assert ledger.lines == 4
    ledger.record("train", **{k: v for k, v in train(1).items() if k != "ev"})
    ledger.close()
    records, torn = read_ledger(path)
    assert torn == 1 and records[3] is None and records[4]["ev"] == "train"
    out = account(records, torn)
    assert out.ok and out.torn == 1 and out.trained_samples == 4


def test_the_cli_exit_code_says_whether_prompts_were_lost(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "ledger.jsonl").write_text("\n".join(json.dumps(r) for r in (START, draw(1), gen(1, 0),
                                                                                   train(1))) + "\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ledger.jsonl").write_text("\n".join(json.dumps(r) for r in (START, draw(1), draw(2),
                                                                                    gen(2, 0), train(2))) + "\n")
    out = StringIO()
    assert run_ledger(str(tmp_path / "ok"), out=out) == 0 and "lost prompts        0" in out.getvalue()
    out = StringIO()
    assert run_ledger(str(tmp_path / "bad"), out=out) == 1 and "LOST: batch 1 never trained" in out.getvalue()
    assert run_ledger(str(tmp_path / "nothing"), out=StringIO(), err=StringIO()) == 2


ASYNC_RUN = ("max_steps=24", "save_steps=3", "eval_steps=0", "rollout_mode=async", "async_generation_ratio=2",
             "actor_infer.device_mapping=[1]", "resume_from_checkpoint=latest")


def test_sigkill_at_random_points_loses_and_duplicates_no_prompt(tmp_path: Path) -> None:
    """An async run (2 batches ahead, checkpoint every 3 steps) killed with SIGKILL three times at random
    moments (counted in ledger records, so a kill can land mid-generation, mid-step or mid-save), resumed
    each time, then finished. The ledger must account for every prompt, and, checked independently of
    the ledger's own accounting, step k must have trained exactly the k-th batch of the sampler's stream."""
    from tests.trainer.pipeline.conftest import FAST
    from trainer.data.sampler import PromptSampler

    out = tmp_path / "run"
    args = [sys.executable, "-m", "trainer", "run", str(DEMO_GRPO), "--workers", "local", *FAST, f"output_dir={out}",
            *ASYNC_RUN]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ledger = out / "ledger.jsonl"
    rng = random.Random(17)
    kills = []
    for attempt in range(4):
        before = _lines(ledger)
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if attempt == 3:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err.decode()[-2000:]
            break
        kill_after = rng.randint(8, 40)  # new ledger records; a whole run writes ~90
        deadline = time.monotonic() + 240
        while proc.poll() is None and _lines(ledger) - before < kill_after and time.monotonic() < deadline:
            time.sleep(0.002)
        assert proc.poll() is None, f"attempt {attempt} ended before its kill point: {proc.stderr.read().decode()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills.append(_lines(ledger) - before)

    result = cli(["ledger", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lost prompts        0" in result.stdout and "duplicated prompts  0" in result.stdout
    assert "OK: no prompt lost or duplicated" in result.stdout
    records, torn = read_ledger(ledger)
    accounting = account(records, torn)
    assert accounting.attempts >= 2 and sum(kills) >= 24, kills
    # independent of the ledger's accounting: the trained batches are the sampler's stream, in order
    draws = {r["batch"]: r["prompts"] for r in _effective(records) if r["ev"] == "draw"}
    trained = [r for r in _effective(records) if r["ev"] == "train"]
    assert [r["step"] for r in trained] == list(range(1, 25))
    sampler = PromptSampler(64, 4, seed=42)  # FAST: 64 synthetic prompts, 4 per step; the demo's seed
    assert [draws[r["batch"]] for r in trained] == [sampler.next_batch() for _ in range(24)]
    assert max(r["staleness"] for r in trained) <= 2


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _effective(records: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The records no later resume rolled back: for each resume, drop the lines from its `upto` to it."""
    keep = [r is not None for r in records]
    for line, r in enumerate(records):
        if r is not None and r["ev"] == "resume" and r["upto"] is not None:
            for voided in range(r["upto"], line):
                keep[voided] = False
    return [r for r, k in zip(records, keep, strict=True) if k and r is not None]


def test_the_position_check_is_one_function() -> None:
    """position_gap is the ledger's only position comparison (replayed draws and extensions, resume records, the
    resume report): nothing recorded or the same position is no gap; ahead is lost, behind is duplicated."""
    from trainer.pipeline.run.ledger import PositionGap, position_gap

    assert position_gap(None, 5) is None and position_gap(4, 4) is None
    assert position_gap(4, 7) == PositionGap("lost", 4, 7) and position_gap(4, 7).prompts == 3
    assert position_gap(7, 4) == PositionGap("duplicated", 4, 7)
    source = (REPO_ROOT / "trainer" / "pipeline" / "run" / "ledger.py").read_text()
    assert source.count("start > self.position") == 0 and source.count("start < self.position") == 0
