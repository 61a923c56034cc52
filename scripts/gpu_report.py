"""The GPU check's report: its rows (one JSON object a line, appended as each step or row finishes) and
the one verdict they add up to. Standard library only: it runs before anything is installed.

    python scripts/gpu_report.py add RESULTS.jsonl --section pytest --state passed --seconds 108 --note "…"
    python scripts/gpu_report.py summary RESULTS.jsonl   # the table and `GPU CHECK PASSED|INCOMPLETE|FAILED`

A row: {"section": "demo", "case": "torch_train", "state": "passed", "note": "...", ...figures}. Its key is
section/case (section alone for the script's own steps). States:
  passed        ran, and met its bar where it has one (a demo's learning margin, a throughput target)
  below target  a measurement that ran but missed its target (reported; not a failure of the check)
  smoke         ran on tiny CPU shapes (checks the code path; proves nothing about a GPU)
  skipped       did not run (no time left, no CUDA, a package missing, not selected): the note says why
  failed        ran and failed (an error, a non-zero exit, a demo that did not learn)
  timed out     killed at its time limit
Verdict: FAILED when any row failed or timed out; else INCOMPLETE when a REQUIRED row is missing or did
not pass (skipped for time, no CUDA, smoke); else PASSED. So the check cannot pass without the GRPO demo
learning on CUDA through every training strategy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REQUIRED = ("install", "imports", "demo/torch_train", "demo/fsdp2_train", "demo/deepspeed_train",
            "demo/megatron_train", "pytest")
PASSED, BELOW_TARGET, SMOKE, SKIPPED, FAILED, TIMED_OUT = (
    "passed", "below target", "smoke", "skipped", "failed", "timed out")
STATES = (PASSED, BELOW_TARGET, SMOKE, SKIPPED, FAILED, TIMED_OUT)
FAILING = (FAILED, TIMED_OUT)
EXIT_CODES = {"PASSED": 0, "FAILED": 1, "INCOMPLETE": 3}


def key(row: Mapping[str, Any]) -> str:
    return "/".join(str(row[k]) for k in ("section", "case") if row.get(k) not in (None, ""))


def verdict(rows: Iterable[Mapping[str, Any]], required: Sequence[str] = REQUIRED) -> tuple[str, list[str]]:
    """(PASSED | INCOMPLETE | FAILED, the reasons). The last row of a key counts (a rerun replaces it)."""
    last: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row.get("state") not in STATES:
            raise ValueError(f"row {key(row) or row!r}: state {row.get('state')!r} is not one of {', '.join(STATES)}")
        last[key(row)] = row
    failing = [f"{k}: {r['state']}{': ' + r['note'] if r.get('note') else ''}"
               for k, r in last.items() if r["state"] in FAILING]
    if failing:
        return "FAILED", failing
    unmet = [f"{name}: not run" if name not in last else
             f"{name}: {last[name]['state']}{': ' + last[name]['note'] if last[name].get('note') else ''}"
             for name in required if name not in last or last[name]["state"] != PASSED]
    if unmet:
        return "INCOMPLETE", unmet
    return "PASSED", []


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a results file; a line cut short by a kill (the last one) is left out."""
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """One line, flushed to disk: rows written before a kill survive it."""
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, default=str) + "\n")
        out.flush()


def cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    lines = []
    for row in rows:
        figures = "  ".join(f"{k}={cell(v)}" for k, v in row.items() if k not in ("section", "case", "state", "note"))
        note = f"  ({row['note']})" if row.get("note") else ""
        lines.append(f"  {key(row):34} {row['state']:12} {figures}{note}".rstrip())
    return lines


def summary(path: Path, required: Sequence[str] = REQUIRED) -> tuple[str, list[str]]:
    rows = read_rows(path)
    result, reasons = verdict(rows, required)
    lines = table(rows)
    below = [key(r) for r in rows if r["state"] == BELOW_TARGET]
    if below:
        lines.append(f"  below target (measured, not failing): {', '.join(below)}")
    lines += [f"  {'fails' if result == 'FAILED' else 'missing'}: {reason}" for reason in reasons]
    lines.append(f"GPU CHECK {result}")
    return result, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="append one row")
    add.add_argument("results", type=Path)
    add.add_argument("--section", required=True)
    add.add_argument("--case", default="")
    add.add_argument("--state", required=True, choices=STATES)
    add.add_argument("--seconds", type=float)
    add.add_argument("--note", default="")
    show = commands.add_parser("summary", help="print the table and the verdict; exit 0 PASSED, 1 FAILED, 3 INCOMPLETE")
    show.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.command == "add":
        row = {"section": args.section, "case": args.case, "state": args.state, "seconds": args.seconds,
               "note": args.note}
        append_row(args.results, {k: v for k, v in row.items() if v not in (None, "")})
        return 0
    result, lines = summary(args.results)
    print("\n".join(lines))
    return EXIT_CODES[result]


if __name__ == "__main__":
    sys.exit(main())
