"""Every benchmark of bench/ runs end to end in its smoke mode (tiny sizes, the whole path: servers, sockets,
peers where installed), so that a change that breaks a benchmark fails CI the day it lands. The commands
and the output contract (a `ratio` line, or `peer skipped: …` for a peer not installed here) are
bench/run_all.py's, which runs the same smoke modes by hand: `python bench/run_all.py --smoke`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import BENCHES, REPO, Bench, commands, parse_output, run_command

SMOKE_TIMEOUT_S = 300
BENCH_SCRIPTS = {p.stem for p in (REPO / "bench").glob("*.py")}
# modules the benchmarks import, not benchmarks themselves
HELPERS = {"platform_setup", "trainer_run", "run_all"}


def test_every_bench_script_has_a_smoke_entry() -> None:
    assert BENCH_SCRIPTS - HELPERS - {b.name for b in BENCHES} == set()


# Not marked `slow` even where a smoke takes over ~30 s (Bench.slow says why): CI's pass, which leaves the slow
# tail out (decision 0053), still runs every bench's smoke.
@pytest.mark.parametrize("bench", BENCHES, ids=lambda b: b.name)
def test_bench_smoke(bench: Bench) -> None:
    if not bench.script.exists():
        pytest.skip(f"{bench.script.relative_to(REPO)} is not in this checkout yet")
    [argv] = commands(bench, smoke=True)
    result = run_command(argv, timeout=SMOKE_TIMEOUT_S)
    tail = "\n".join(result["output"][-40:])
    assert result["exit_code"] == 0, f"{' '.join(result['argv'])} exited {result['exit_code']}:\n{tail}"
    if bench.smoke_ratio:
        return
    assert result["ratios"] or result["peers_skipped"], f"no `ratio` or `peer skipped:` line:\n{tail}"
    for peer in result["peers_skipped"]:
        print(f"{bench.name}: peer skipped: {peer}")  # shown with -rP / -s: never a silent skip


def test_parse_output_reads_ratio_and_skipped_peer_lines() -> None:
    text = ("PolicyLab:    8.3 samples/s\n  ratio PolicyLab / TRL: 1.28x\nratio   0.0151 1,234.5\n"
            "peer skipped: TRL (not installed)\nthe ratio is shown above\n")
    parsed = parse_output(text)
    assert [r["values"] for r in parsed["ratios"]] == [[1.28], [0.0151, 1234.5]]
    assert parsed["peers_skipped"] == ["TRL (not installed)"]


def test_run_all_writes_a_dated_summary(tmp_path: Path) -> None:
    # the cheapest smoke (faults collects its suite): the summary's shape, not the benchmark
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "run_all.py"), "--smoke", "--only", "faults",
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [path] = tmp_path.glob("*-smoke.json")
    summary = json.loads(path.read_text())
    assert summary["mode"] == "smoke" and len(summary["commit"]) == 40
    assert summary["machine"]["cpus"] >= 1 and path.name.startswith(summary["date"][:10])
    [faults] = summary["benches"]["faults"]
    assert faults["argv"] == ["bench/faults.py", "--smoke"] and faults["exit_code"] == 0
