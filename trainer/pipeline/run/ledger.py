"""The resume ledger: what happened to every prompt a run drew, in `<output_dir>/ledger.jsonl`.

One JSON object per line, appended by the driver (both of its threads) and never rewritten. Each
record is a single `os.write` on an `O_APPEND` descriptor, so a process killed at any instant
leaves whole lines behind (the kernel holds them); checkpoints `fsync` the file, so a machine
crash loses at most the records after the last checkpoint, which a resume redoes anyway. A torn
last line (machine crash mid-write) is closed with a newline on the next open and skipped by
the reader. Records (`ev`):

    start       a fresh run: mode, lookahead, max_staleness, stale_samples, max_steps, position
    resume      from a checkpoint: its step, `upto` (ledger lines it had seen; null for another
                run's checkpoint), its sampler position and next batch id, its buffered and pending
                batches {id: prompts}; every record from line `upto` up to here is rolled back
    draw        batch j's prompt indices and the sampler stream positions [from, to) they cover
    extend      batch j drew more prompts [from, to) to replace filtered groups (dynamic sampling)
    filter      batch j's prompts whose groups a query filter left out: generated, never trained
    generate    batch j generated with policy version v (samples)
    drop        batch j discarded at step k for staleness s > max_staleness; its prompts are
                regenerated with the latest weights
    train       batch j trained at step k (version, staleness, samples, loss weight)
    checkpoint  step k saved; `upto` and the batches it holds (buffer) or re-queues (pending)
    end         max_steps reached; batches drawn but never trained (`left`)

`account(read_ledger(path))` replays the records that count (rolled-back ones set aside) and
checks that every drawn prompt was trained exactly once, filtered out, or is still in flight, that the sampler
stream was drawn without gaps or overlaps, and that no batch was trained beyond max_staleness.
Torch-free: `python -m trainer ledger RUN_DIR` runs it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEDGER_FILE = "ledger.jsonl"


class Ledger:
    """The append-only writer (thread-safe); `lines` counts the records written so far."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.read_bytes() if self.path.exists() else b""
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lines = existing.count(b"\n")
        self.lock = threading.Lock()
        if existing and not existing.endswith(b"\n"):  # a torn record: close it, the reader skips it
            os.write(self.fd, b"\n")
            self.lines += 1

    def record(self, ev: str, **fields: Any) -> None:
        line = json.dumps({"ev": ev, "time": round(time.time(), 3), **fields}, separators=(",", ":")) + "\n"
        with self.lock:
            os.write(self.fd, line.encode())
            self.lines += 1

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True)
class PositionGap:
    """Sampler stream positions [start, stop) between where the records stand and where the next draw (or
    a checkpoint's sampler) is: `lost` (skipped, never drawn) or `duplicated` (drawn a second time)."""

    kind: str  # "lost" | "duplicated"
    start: int
    stop: int

    @property
    def prompts(self) -> int:
        return self.stop - self.start


def position_gap(recorded: int | None, actual: int) -> PositionGap | None:
    """THE position check of the ledger (replayed draws and extensions, a resume record, the resume
    report): None when the stream position `actual` continues `recorded` (or nothing is recorded yet)."""
    if recorded is None or actual == recorded:
        return None
    return PositionGap("lost", recorded, actual) if actual > recorded else PositionGap("duplicated", actual, recorded)


def read_ledger(path: str | Path) -> tuple[list[dict[str, Any] | None], int]:
    """The records in file order (None for a torn or unreadable line, which keeps its line number)
    and how many such lines there were."""
    records: list[dict[str, Any] | None] = []
    lines = Path(path).read_bytes().decode("utf-8", errors="replace").split("\n")  # the writer's line breaks only
    if lines[-1] == "":
        lines.pop()
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            records.append(None)
    return records, sum(r is None for r in records)


@dataclass
class BatchFate:
    prompts: list[int]
    generated: int = 0
    dropped: int = 0
    trained_at: list[int] = field(default_factory=list)
    inherited: bool = False  # drawn by the run whose checkpoint this one forked from
    filtered: list[int] = field(default_factory=list)  # left out by a query filter (dynamic sampling)


@dataclass
class Accounting:
    """The ledger's verdict. `ok` holds when no prompt was lost or duplicated and the records agree."""

    records: int = 0
    torn: int = 0
    attempts: int = 0
    finished: bool = False
    batches: dict[int, BatchFate] = field(default_factory=dict)
    generated_samples: int = 0
    dropped_samples: int = 0
    trained_samples: int = 0
    downweighted_samples: int = 0
    staleness: list[int] = field(default_factory=list)
    max_staleness: int | None = None
    inherited_steps: int = 0
    rolled_back: dict[str, int] = field(default_factory=dict)
    rolled_back_steps: list[int] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lost_prompts: int = 0
    duplicated_prompts: int = 0
    extra_prompts: int = 0
    filtered_prompts: int = 0
    left_in_flight: list[int] = field(default_factory=list)
    position: int | None = None  # the sampler stream position after the last record that counts
    last_step: int = 0  # the last step that trained a batch (or the inherited checkpoint's step)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.problems)


def account(records: list[dict[str, Any] | None], torn: int = 0) -> Accounting:
    """Replay the records that count and judge them (see the module docstring)."""
    out = Accounting(records=len(records), torn=torn)
    voided = _rolled_back_lines(records)
    state = _Replay(out)
    for line, record in enumerate(records):
        if record is None:
            continue
        if line in voided:
            if record["ev"] != "checkpoint":  # a marker written after its snapshot, not an event to redo
                out.rolled_back[record["ev"]] = out.rolled_back.get(record["ev"], 0) + 1
            if record["ev"] == "train":
                out.rolled_back_steps.append(int(record["step"]))
            continue
        state.apply(line, record)
    state.finish()
    return out


def _rolled_back_lines(records: list[dict[str, Any] | None]) -> set[int]:
    """Lines a later `start` (everything before it) or `resume` (from its `upto`) superseded."""
    voided: set[int] = set()
    for line, record in enumerate(records):
        if record is None:
            continue
        if record["ev"] == "start":
            voided.update(range(line))
        elif record["ev"] == "resume":
            upto = record.get("upto")
            voided.update(range(0 if upto is None or upto > line else upto, line))
    return voided


class _Replay:
    def __init__(self, out: Accounting) -> None:
        self.out = out
        self.position: int | None = None
        self.bound: int | None = None
        self.drops = "drop"
        self.steps: dict[int, int] = {}

    def apply(self, line: int, r: dict[str, Any]) -> None:
        ev, out = r["ev"], self.out
        if ev in ("start", "resume"):
            out.attempts += 1
            out.finished = False
            self.bound, self.drops = r.get("max_staleness"), r.get("stale_samples", "drop")
            if ev == "resume":
                self.resume(line, r)
            else:
                self.position = int(r.get("position", 0))
            if self.bound is not None:
                out.max_staleness = self.bound
            return
        batch = int(r["batch"]) if "batch" in r else None
        fate = out.batches.get(batch) if batch is not None else None
        if ev == "draw":
            self.draw(line, r)
        elif ev == "extend" and fate is not None:
            self.extend(line, r, fate)
        elif ev == "filter" and fate is not None:
            self.filter(line, r, fate)
        elif fate is None and batch is not None:
            out.problems.append(f"line {line + 1}: {ev} of batch {batch}, which was never drawn")
        elif fate is None and ev in ("generate", "drop", "train"):
            out.problems.append(f"line {line + 1}: {ev} without a batch number")
        elif ev == "generate" and fate is not None:
            fate.generated += 1
            out.generated_samples += int(r["samples"])
        elif ev == "drop" and fate is not None:
            fate.dropped += 1
            out.dropped_samples += int(r["samples"])
        elif ev == "train" and fate is not None:
            self.train(line, r, fate)
        elif ev == "end":
            out.finished = True
            untrained = sorted(j for j, f in out.batches.items() if not f.trained_at)
            if sorted(int(j) for j in r.get("left", [])) != untrained:
                out.problems.append(f"line {line + 1}: end says {r.get('left')} were left in flight, the records "
                                    f"say {untrained}")

    def draw(self, line: int, r: dict[str, Any]) -> None:
        out, batch = self.out, int(r["batch"])
        prompts = [int(p) for p in r["prompts"]]
        if batch in out.batches:
            out.duplicated.append(f"batch {batch} drawn twice (line {line + 1})")
            out.duplicated_prompts += len(prompts)
        self._advance(line, r, f"batch {batch}")
        out.batches[batch] = BatchFate(prompts)

    def _advance(self, line: int, r: dict[str, Any], what: str) -> None:
        """The stream positions [from, to) a draw or extend covers follow the previous ones."""
        out, start, stop = self.out, int(r["from"]), int(r["to"])
        if stop - start != len(r["prompts"]):
            out.problems.append(f"line {line + 1}: {what} has {len(r['prompts'])} prompts for stream "
                                f"positions [{start}, {stop})")
        gap = position_gap(self.position, start)
        if gap is not None and gap.kind == "lost":
            out.lost.append(f"sampler positions [{gap.start}, {gap.stop}) skipped before {what}")
            out.lost_prompts += gap.prompts
        elif gap is not None:
            out.duplicated.append(f"sampler positions [{gap.start}, {gap.stop}) drawn again for {what}")
            out.duplicated_prompts += gap.prompts
        self.position = stop

    def extend(self, line: int, r: dict[str, Any], fate: BatchFate) -> None:
        if fate.trained_at:
            self.out.problems.append(f"line {line + 1}: batch {r['batch']} extended after it was trained")
        self._advance(line, r, f"the extension of batch {r['batch']}")
        fate.prompts.extend(int(p) for p in r["prompts"])
        self.out.extra_prompts += len(r["prompts"])

    def filter(self, line: int, r: dict[str, Any], fate: BatchFate) -> None:
        prompts = [int(p) for p in r["prompts"]]
        remaining = list(fate.prompts)
        for p in [*fate.filtered, *prompts]:
            if p not in remaining:
                self.out.problems.append(f"line {line + 1}: batch {r['batch']} filters prompt {p}, which it "
                                         "did not draw (or filters it twice)")
                return
            remaining.remove(p)
        fate.filtered.extend(prompts)
        self.out.filtered_prompts += len(prompts)

    def train(self, line: int, r: dict[str, Any], fate: BatchFate) -> None:
        out, batch, step = self.out, int(r["batch"]), int(r["step"])
        staleness, samples = int(r["staleness"]), int(r["samples"])
        if fate.trained_at:
            out.duplicated.append(f"batch {batch} trained again at step {step} (before: {fate.trained_at})")
            out.duplicated_prompts += len(fate.prompts)
        if step in self.steps:
            out.problems.append(f"line {line + 1}: step {step} trained batch {batch} and batch {self.steps[step]}")
        if self.bound is not None and staleness > self.bound:
            if self.drops == "drop":
                out.problems.append(f"batch {batch} trained at step {step} with staleness {staleness} > "
                                    f"max_staleness {self.bound}")
            else:
                out.downweighted_samples += samples
        if "prompts" in r and int(r["prompts"]) != len(fate.prompts) - len(fate.filtered):
            out.lost.append(f"batch {batch} trained {r['prompts']} prompts at step {step} of the "
                            f"{len(fate.prompts)} drawn, {len(fate.filtered)} filtered out")
            out.lost_prompts += abs(len(fate.prompts) - len(fate.filtered) - int(r["prompts"]))
        fate.trained_at.append(step)
        self.steps[step] = batch
        out.trained_samples += samples
        out.staleness.append(staleness)

    def resume(self, line: int, r: dict[str, Any]) -> None:
        """Same run: the replayed state must be what the checkpoint holds. Another run's checkpoint
        (`upto` null, a fork): its state is where this ledger starts."""
        out = self.out
        step, position, upto = int(r["step"]), int(r["position"]), r.get("upto")
        held = {int(j): [int(p) for p in prompts] for part in ("buffer", "pending")
                for j, prompts in r.get(part, {}).items()}
        if upto is not None and upto > line:
            out.problems.append(f"line {line + 1}: resume refers to {upto} ledger lines; only {line} precede it")
        if upto is None or upto > line:
            out.inherited_steps = step
            out.batches = {j: BatchFate(prompts, inherited=True) for j, prompts in held.items()}
            self.steps = {}
            self.position = position
            return
        untrained = sorted(j for j, f in out.batches.items() if not f.trained_at)
        if untrained != sorted(held):
            out.problems.append(f"resume at step {step}: the checkpoint holds batches {sorted(held)}, the records "
                                f"say {untrained} were drawn and not trained")
        if max(self.steps, default=out.inherited_steps) != step:
            out.problems.append(f"resume at step {step}: the records trained up to step "
                                f"{max(self.steps, default=out.inherited_steps)}")
        if position_gap(self.position, position) is not None:
            out.problems.append(f"resume at step {step}: sampler position {position} in the checkpoint, "
                                f"{self.position} in the records")
        self.position = position

    def finish(self) -> None:
        out = self.out
        last_step = max(self.steps, default=out.inherited_steps)
        out.position, out.last_step = self.position, last_step
        for batch, fate in sorted(out.batches.items()):
            if fate.trained_at:
                continue
            if batch <= last_step:  # batch j is step j's: a later step ran without it
                out.lost.append(f"batch {batch} never trained, though step {last_step} ran")
                out.lost_prompts += len(fate.prompts)
            elif out.finished:
                out.left_in_flight.append(batch)
        missing = sorted(set(range(out.inherited_steps + 1, last_step + 1)) - set(self.steps))
        if missing:
            out.problems.append(f"steps {missing} trained no batch")


def format_accounting(path: Path, out: Accounting) -> str:
    """The report `python -m trainer ledger` prints."""
    drawn = [f for f in out.batches.values() if not f.inherited]
    inherited = len(out.batches) - len(drawn)
    trained = [f for f in out.batches.values() if f.trained_at]
    steps = [s for f in trained for s in f.trained_at]
    untrained = sorted(j for j, f in out.batches.items() if not f.trained_at)
    rows = [
        ("records", f"{out.records} in {out.attempts} attempt(s)"
                    + (f", {out.torn} torn line(s) skipped" if out.torn else "")),
        ("prompts drawn", f"{sum(len(f.prompts) for f in drawn)} in {len(drawn)} batches"
                          + (f" (+ {inherited} in flight in the checkpoint of step {out.inherited_steps} this "
                             "run forked from)" if inherited else "")),
        ("samples generated", f"{out.generated_samples} in {sum(f.generated for f in out.batches.values())} "
                              "generations"),
        ("trained", f"{sum(len(f.prompts) - len(f.filtered) for f in trained)} prompts / {out.trained_samples} "
                    "samples in "
                    f"{len(steps)} steps"
         + (f" ({min(steps)}..{max(steps)})" if steps else "")),
        ("staleness", _staleness_line(out)),
        ("dropped (stale)", f"{out.dropped_samples} samples in {sum(f.dropped for f in out.batches.values())} "
                            "batches, all regenerated" if out.dropped_samples else "0"),
        ("down-weighted", str(out.downweighted_samples)),
        ("dynamic sampling", f"{out.extra_prompts} extra prompts drawn, {out.filtered_prompts} prompts' groups "
                             "filtered out" if out.extra_prompts or out.filtered_prompts else "-"),
        ("left in flight", f"{len(out.left_in_flight)} batches {out.left_in_flight}" if out.finished
         else f"run not finished; batches {untrained} drawn, not trained yet"),
        ("rolled back", _rolled_back_line(out)),
        ("lost prompts", str(out.lost_prompts)),
        ("duplicated prompts", str(out.duplicated_prompts)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"ledger {path}"] + [f"  {name.ljust(width)}  {value}" for name, value in rows]
    lines += [f"  LOST: {item}" for item in out.lost] + [f"  DUPLICATED: {item}" for item in out.duplicated]
    lines += [f"  INCONSISTENT: {item}" for item in out.problems]
    lines.append("OK: no prompt lost or duplicated" if out.ok else "FAILED")
    return "\n".join(lines) + "\n"


def _staleness_line(out: Accounting) -> str:
    if not out.staleness:
        return "-"
    values = out.staleness
    bound = f"; bound max_staleness {out.max_staleness}" if out.max_staleness is not None else ""
    return f"min {min(values)} mean {sum(values) / len(values):.2f} max {max(values)}{bound}"


def _rolled_back_line(out: Accounting) -> str:
    if not out.rolled_back:
        return "0"
    kinds = ", ".join(f"{n} {ev}" for ev, n in sorted(out.rolled_back.items()))
    redone = f"; steps {sorted(set(out.rolled_back_steps))} redone after resume" if out.rolled_back_steps else ""
    return f"{kinds} record(s) after the checkpoint resumed from{redone}"
