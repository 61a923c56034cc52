"""The resume report: what a resumed attempt restored, and whether it adds up (docs/decisions/0031).

Every attempt that was asked to resume writes one (a line of `<output_dir>/resume_reports.jsonl`, a
`resume` telemetry event, the log): the checkpoint and its step, the data position (epoch, index,
stream position), the ledger's counts up to the checkpoint (prompts drawn, trained, in flight,
filtered, dropped as stale, lost, duplicated), the RNG states restored, each trained role's optimizer
and scheduler step, the KL controller and the reward-normalisation state.

It does not add up, and the attempt fails with the report's problems as its message instead of
training on, when:

- the ledger up to the checkpoint lost or duplicated a prompt, or its records contradict themselves;
- the checkpoint's data position is not where the ledger says the sampler stood at the checkpoint
  (behind it: prompts would be drawn twice; ahead of it: prompts would be skipped), or its step or
  the batches it holds in flight differ from the ledger's;
- resume was asked and no finished checkpoint was found, while the run's ledger records checkpoints
  saved since its last fresh start (or checkpoint folders lack their COMPLETE marker): they are gone
  or unreadable, and starting from scratch would silently redo that training. Where none was ever
  saved, "latest" starts fresh (as ROLL does; steps trained before a kill that came before the first
  save are redone) and the report says so.

Torch-free: the pipeline hands it plain values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.pipeline.run.ledger import account, position_gap, read_ledger

REPORTS_FILE = "resume_reports.jsonl"


class ResumeError(RuntimeError):
    """A resume that does not add up; the message names every problem."""


@dataclass
class ResumeReport:
    asked: str
    checkpoint: str | None = None
    step: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)
    kl: dict[str, Any] = field(default_factory=dict)
    reward_norm: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, **asdict(self)}

    def summary(self) -> str:
        """The failure message: every problem, one after another."""
        where = f"from {self.checkpoint}" if self.checkpoint else f"(resume_from_checkpoint={self.asked})"
        return f"resume {where} does not add up: " + "; ".join(self.problems)

    def lines(self) -> list[str]:
        """The report as the run's log shows it."""
        out = [f"resume report: {'OK' if self.ok else 'FAILED'}; checkpoint {self.checkpoint or 'none'} "
               f"(asked: {self.asked}), step {self.step}"]
        if self.data:
            out.append("  data position: " + ", ".join(f"{k} {v}" for k, v in self.data.items()))
        if self.ledger:
            out.append("  ledger: " + ", ".join(f"{k} {v}" for k, v in self.ledger.items()))
        for name in ("rng", "optimizer", "kl", "reward_norm"):
            value = getattr(self, name)
            if value:
                out.append(f"  {name}: {json.dumps(value, sort_keys=True)}")
        out += [f"  note: {n}" for n in self.notes] + [f"  DOES NOT ADD UP: {p}" for p in self.problems]
        return out


def resume_asked(resume_mode: str | None, resume_from_checkpoint: Any) -> str | None:
    """What the config asks to resume from ("latest" or a path), or None for a fresh start."""
    if resume_mode == "none":
        return None
    if resume_mode == "latest":
        return "latest"
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("latest", "true"):
        return "latest"
    return str(resume_from_checkpoint)


def no_checkpoint(asked: str, root: Path, ledger_path: Path, *, error: str | None = None) -> ResumeReport:
    """Resume was asked and nothing resumable was found (`error`: why the asked path is not a checkpoint)."""
    report = ResumeReport(asked=asked)
    if error is not None:
        report.problems.append(f"checkpoint not found: {error}; starting from scratch instead was not asked for")
        return report
    traces = []
    unfinished = sorted(p.name for p in root.glob("step_*") if p.is_dir()) if root.is_dir() else []
    if unfinished:
        traces.append(f"checkpoint folder(s) {', '.join(unfinished)} without their COMPLETE marker")
    records = read_ledger(ledger_path)[0] if ledger_path.is_file() else []
    last_start = max((i for i, r in enumerate(records) if r is not None and r["ev"] == "start"), default=0)
    saved = [r for r in records[last_start:] if r is not None and r["ev"] == "checkpoint"]
    if saved:
        steps = ", ".join(str(r.get("step")) for r in saved)
        traces.append(f"the ledger {ledger_path} records checkpoint(s) of step {steps} saved (the last at "
                      f"{saved[-1].get('path')})")
    if traces:
        report.problems.append(f"checkpoint not found: no finished checkpoint under {root}, yet there is "
                               f"{' and '.join(traces)}; starting from scratch would silently redo that training "
                               "(resume_from_checkpoint=false starts fresh on purpose)")
        return report
    trained = account(records).last_step if records else 0
    report.notes.append(f"nothing to resume: no checkpoint under {root} and none recorded in the ledger; started "
                        "fresh" + (f" (steps up to {trained}, never checkpointed, are redone)" if trained else ""))
    return report


def check_data_and_ledger(report: ResumeReport, *, sampler_state: dict[str, Any], position: int,
                          next_batch: int, held_batches: list[int], ledger_file: str | None,
                          ledger_lines: int | None, same_run: bool) -> None:
    """Fill the report's data position and ledger counts from the checkpoint (its sampler state, stream
    position, next batch id and the batches it holds drawn but not trained) and the ledger it was recorded
    in (its first `ledger_lines` records), and name what does not agree."""
    report.data = {k: sampler_state[k] for k in ("epoch", "index") if k in sampler_state}
    if "domains" in sampler_state:  # domain_interleave_probs: one stream per domain
        report.data["domains"] = {d: {"epoch": s["epoch"], "index": s["index"]}
                                  for d, s in sampler_state["domains"].items()}
    report.data |= {"position": position, "next_batch": next_batch}
    if ledger_file is None or ledger_lines is None:
        report.notes.append("ledger: not verifiable (a checkpoint older than the ledger)")
        return
    path = Path(ledger_file)
    if not path.is_file():
        message = f"ledger: {path}, which the checkpoint was recorded in, is gone"
        (report.problems if same_run else report.notes).append(message + ("" if same_run else "; not verifiable"))
        return
    records, _ = read_ledger(path)
    if len(records) < ledger_lines:
        report.problems.append(f"ledger: {path} has {len(records)} records; the checkpoint counted {ledger_lines}")
        return
    upto = records[:ledger_lines]
    ledger = account(upto, sum(r is None for r in upto))
    untrained = sorted(j for j, f in ledger.batches.items() if not f.trained_at)
    report.ledger = {
        "file": str(path),
        "prompts_drawn": sum(len(f.prompts) for f in ledger.batches.values() if not f.inherited),
        "prompts_trained": sum(len(f.prompts) - len(f.filtered) for f in ledger.batches.values() if f.trained_at),
        "prompts_in_flight": sum(len(ledger.batches[j].prompts) for j in untrained),
        "prompts_filtered": ledger.filtered_prompts,
        "samples_dropped_stale": ledger.dropped_samples,
        "batches_dropped_stale": sum(f.dropped for f in ledger.batches.values()),
        "lost": ledger.lost_prompts,
        "duplicated": ledger.duplicated_prompts,
    }
    report.problems += [f"ledger: prompt(s) lost: {item}" for item in ledger.lost]
    report.problems += [f"ledger: prompt(s) duplicated: {item}" for item in ledger.duplicated]
    report.problems += [f"ledger: inconsistent: {item}" for item in ledger.problems]
    if ledger.last_step != report.step:
        report.problems.append(f"step: the checkpoint is of step {report.step}, the ledger trained up to step "
                               f"{ledger.last_step}")
    if untrained != sorted(held_batches):
        report.problems.append(f"in flight: the checkpoint holds batches {sorted(held_batches)}, the ledger says "
                               f"{untrained} were drawn and not trained")
    recorded = ledger.position
    report.data["ledger_position"] = recorded
    gap = position_gap(recorded, position)
    if gap is not None and gap.kind == "duplicated":
        report.problems.append(f"data position moved backwards: the checkpoint's sampler is at stream position "
                               f"{position} ({_epoch_index(report.data)}), the ledger drew up to {recorded}: "
                               f"prompts [{gap.start}, {gap.stop}) would be drawn twice")
    elif gap is not None:
        report.problems.append(f"data position skipped ahead: the checkpoint's sampler is at stream position "
                               f"{position} ({_epoch_index(report.data)}), the ledger drew up to {recorded}: "
                               f"prompts [{gap.start}, {gap.stop}) would never be drawn")


def _epoch_index(data: dict[str, Any]) -> str:
    if "domains" in data:
        return "; ".join(f"{d}: epoch {s['epoch']}, index {s['index']}" for d, s in data["domains"].items())
    return f"epoch {data.get('epoch', '?')}, index {data.get('index', '?')}"


def restored_rng(checkpoint: Path) -> dict[str, Any]:
    """The RNG states a loaded checkpoint held: the driver's, and each role's ranks."""
    found: dict[str, Any] = {"driver": (checkpoint / "driver_rng.pt").is_file()}
    for role_dir in sorted(p for p in checkpoint.iterdir() if p.is_dir()):
        ranks = sorted(int(f.stem.removeprefix("rng_rank")) for f in role_dir.rglob("rng_rank*.pt")
                       if f.stem.removeprefix("rng_rank").isdecimal())
        if ranks:
            found[role_dir.name] = ranks
    return found


def restored_training(per_role: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each trained role's optimizer and scheduler step (rank 0's; `ranks_disagree` when ranks differ)."""
    out: dict[str, Any] = {}
    for role, ranks in per_role.items():
        if not ranks:
            continue
        first = dict(ranks[0] or {})
        if any(r != ranks[0] for r in ranks[1:]):
            first["ranks_disagree"] = True
        out[role] = first
    return out


def write(report: ResumeReport, output_dir: Path) -> Path:
    """Append the report to `<output_dir>/resume_reports.jsonl`."""
    path = output_dir / REPORTS_FILE
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(report.to_dict(), separators=(",", ":"), default=str) + "\n")
    return path
