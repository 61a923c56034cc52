"""Every benchmark of bench/, as bench/README.md gives it, and a dated JSON summary of what each printed.

    python bench/run_all.py                    # the full benchmarks (well over an hour on the 2-core machine)
    python bench/run_all.py --smoke            # every smoke mode: tiny sizes, the whole path (what CI runs)
    python bench/run_all.py --only ingest run_page [--out DIR]

Writes DIR/<UTC date and time>[-smoke].json (DIR: bench/results for the full runs, to commit with the README's
figures; var/bench-results for smoke runs, which the repository ignores): the machine (host, CPUs, load average
before and after), the commit (and whether the tree had uncommitted changes), and per command its argv, exit
code, seconds, each `ratio` line with its numbers, the peers it skipped (not installed here), and its whole
output, where the absolute figures are. Each benchmark prints at least one line starting with `ratio` (its
figure against the peer), or `peer skipped: <peer> (<why>)` when the peer is not installed.
CI runs the smoke modes through tests/bench/test_bench_smoke.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PG_BENCH_URL = "postgres://postgres@127.0.0.1:5432/policylab_bench"
RATIO_LINE = re.compile(r"^\s*ratio\b", re.IGNORECASE)
PEER_SKIPPED = "peer skipped:"
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


@dataclass(frozen=True)
class Bench:
    name: str
    full: tuple[tuple[str, ...], ...] = ((),)  # the README's command lines (arguments after the script)
    smoke_ratio: str = ""  # empty: the smoke prints a ratio line; else why it does not
    slow: str = ""  # why its smoke takes more than ~30 s on the 2-core CI machine (CI runs it all the same)

    @property
    def script(self) -> Path:
        return REPO / "bench" / f"{self.name}.py"


BENCHES: tuple[Bench, ...] = (
    Bench("ingest", full=((), ("--database-url", PG_BENCH_URL))),
    Bench("run_page", full=((), ("--database-url", PG_BENCH_URL))),
    Bench("grpo_vs_trl", full=((), ("--size", "m20", "--tokens", "64", "--steps", "10"))),
    Bench("rollout", slow="vLLM's CPU engine starts in ~30 s"),
    Bench("rollout_search"),
    Bench("vllm_lora", slow="two vLLM CPU engines start, ~30 s each"),
    Bench("memory"),
    Bench("lora"),
    Bench("packing"),
    Bench("async", full=(("--steps", "150", "--repeats", "2"),)),
    Bench("dynamic_sampling"),
    Bench("watchdog"),
    Bench("gpu", smoke_ratio="the CPU selftest checks the script's paths; its figures need a GPU",
          slow="the CPU selftest runs every section, the demo included (~90 s on a loaded machine)"),
    Bench("faults", smoke_ratio="the smoke collects the fault suite; CI runs it in full (scripts/test.sh)"),
)


def commands(bench: Bench, smoke: bool) -> list[list[str]]:
    runs = [("--smoke",)] if smoke else bench.full
    return [[sys.executable, str(bench.script), *args] for args in runs]


def parse_output(text: str) -> dict[str, list]:
    """The `ratio` lines with the numbers in them, and the `peer skipped` lines, of a benchmark's output."""
    lines = text.splitlines()
    ratios = [{"line": line.strip(), "values": [float(n.replace(",", "")) for n in NUMBER.findall(line)]}
              for line in lines if RATIO_LINE.match(line)]
    skipped = [line.strip()[len(PEER_SKIPPED):].strip() for line in lines if line.strip().startswith(PEER_SKIPPED)]
    return {"ratios": ratios, "peers_skipped": skipped}


def run_command(argv: list[str], timeout: float) -> dict[str, Any]:
    """Run one benchmark command (output echoed as it comes) and summarise it."""
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),
           "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        print(line, end="", flush=True)
        if time.monotonic() > deadline:
            proc.kill()
            out.append(f"[run_all] killed after {timeout:.0f} s\n")
            break
    code = proc.wait()
    text = "".join(out)
    return {"argv": [Path(argv[1]).relative_to(REPO).as_posix(), *argv[2:]], "exit_code": code,
            "seconds": round(time.perf_counter() - started, 1), **parse_output(text), "output": text.splitlines()}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def machine() -> dict[str, Any]:
    return {"host": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="every smoke mode instead of the full benchmarks")
    names = [b.name for b in BENCHES]
    parser.add_argument("--only", nargs="+", choices=names, default=names)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder of the summary (default: bench/results, or var/bench-results with --smoke)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per command (default: 300 smoke, 3600)")
    args = parser.parse_args()
    timeout = args.timeout or (300 if args.smoke else 3600)

    started = dt.datetime.now(dt.UTC)
    summary: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"), "mode": "smoke" if args.smoke else "full",
        "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "machine": machine(), "load_before": os.getloadavg(), "benches": {},
    }
    for bench in BENCHES:
        if bench.name not in args.only:
            continue
        if not bench.script.exists():
            print(f"[run_all] {bench.name}: skipped ({bench.script.relative_to(REPO)} is not in this checkout)")
            continue
        summary["benches"][bench.name] = []
        for argv in commands(bench, args.smoke):
            print(f"[run_all] {' '.join(argv[1:])}", flush=True)
            summary["benches"][bench.name].append(run_command(argv, timeout))
    summary["load_after"] = os.getloadavg()
    summary["seconds"] = round((dt.datetime.now(dt.UTC) - started).total_seconds(), 1)

    out = args.out or (REPO / "var" / "bench-results" if args.smoke else REPO / "bench" / "results")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{started:%Y-%m-%dT%H%M%SZ}{'-smoke' if args.smoke else ''}.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    failed = [f"{name} ({' '.join(r['argv'])}: exit {r['exit_code']})"
              for name, results in summary["benches"].items() for r in results if r["exit_code"] != 0]
    print(f"\n[run_all] {len(summary['benches'])} benchmarks in {summary['seconds']:.0f} s; summary: {path}")
    for name, results in summary["benches"].items():
        for r in results:
            for ratio in r["ratios"]:
                print(f"  {name}: {ratio['line']}")
            for peer in r["peers_skipped"]:
                print(f"  {name}: peer skipped: {peer}")
    if failed:
        print("[run_all] failed: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
