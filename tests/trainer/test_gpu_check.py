"""The GPU check's verdict and flow, on the CPU (issue 44): the check cannot say PASSED unless the GRPO
demo learned on CUDA through every training strategy. The verdict is a pure function over the rows
(scripts/gpu_report.py); bench/gpu.py's plan, skip rule and demo judgement are pure too; one dry run goes
through `bash scripts/gpu_check.sh selftest` (the run step with CUDA hidden, ~15 s)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.gpu import (
    DEMO_MARGIN,
    STRATEGIES,
    RowSpec,
    judge,
    judge_demo,
    peak_tflops,
    plan,
    why_not,
)
from scripts.gpu_report import REQUIRED, append_row, read_rows, verdict

ROOT = Path(__file__).resolve().parents[2]


def report(**states: str) -> list[dict[str, str]]:
    """Every mandatory row passed, except those given (key with / as __: demo__megatron_train="failed")."""
    rows = []
    for name in REQUIRED:
        section, _, case = name.partition("/")
        rows.append({"section": section, "case": case, "state": states.get(name.replace("/", "__"), "passed")})
    return rows


def test_every_mandatory_row_passed_is_passed() -> None:
    assert verdict(report()) == ("PASSED", [])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_demo_skipped_for_time_is_incomplete(strategy: str) -> None:
    rows = report(**{f"demo__{strategy}": "skipped"})
    rows[2 + STRATEGIES.index(strategy)]["note"] = "budget: 12 s left, the row needs ~75 s"
    result, reasons = verdict(rows)
    assert result == "INCOMPLETE"
    assert reasons == [f"demo/{strategy}: skipped: budget: 12 s left, the row needs ~75 s"]


def test_a_failed_demo_is_failed_even_when_others_were_skipped() -> None:
    result, reasons = verdict(report(demo__fsdp2_train="failed", demo__megatron_train="skipped", pytest="skipped"))
    assert result == "FAILED" and reasons == ["demo/fsdp2_train: failed"]


def test_a_missing_mandatory_row_is_incomplete() -> None:
    # the run was killed before the megatron demo and pytest wrote anything
    rows = [r for r in report() if r["case"] != "megatron_train" and r["section"] != "pytest"]
    assert verdict(rows) == ("INCOMPLETE", ["demo/megatron_train: not run", "pytest: not run"])


def test_smoke_rows_never_pass_the_check() -> None:
    assert verdict(report(demo__torch_train="smoke"))[0] == "INCOMPLETE"


def test_measurements_below_target_do_not_fail_but_a_crashed_or_timed_out_one_does() -> None:
    below = [*report(), {"section": "update", "case": "0.5B/fsdp2_train", "state": "below target"},
             {"section": "sync", "case": "1.5B/torch_train", "state": "skipped", "note": "budget"}]
    assert verdict(below) == ("PASSED", [])
    for state in ("failed", "timed out"):
        crashed = [*below, {"section": "update", "case": "1.5B/deepspeed_train", "state": state}]
        assert verdict(crashed) == ("FAILED", [f"update/1.5B/deepspeed_train: {state}"])


def test_the_last_row_of_a_key_counts_and_unknown_states_are_refused() -> None:
    rows = [*report(pytest="failed"), {"section": "pytest", "state": "passed"}]
    assert verdict(rows)[0] == "PASSED"
    with pytest.raises(ValueError, match="state 'ok' is not one of passed"):
        verdict([{"section": "install", "state": "ok"}])


def test_rows_are_appended_as_they_finish_and_a_cut_line_is_left_out(tmp_path: Path) -> None:
    results = tmp_path / "gpu_check.jsonl"
    append_row(results, {"section": "install", "state": "passed"})
    append_row(results, {"section": "demo", "case": "torch_train", "state": "passed", "evals": [0.0, 0.9]})
    with results.open("a") as out:
        out.write('{"section": "demo", "case": "fsdp2_tr')  # killed mid-write
    assert [r.get("case") for r in read_rows(results)] == [None, "torch_train"]


def test_the_demo_comes_first_whatever_the_sections_say() -> None:
    rows = plan({"sync", "update", "demo", "generate"}, smoke=False)
    assert [r.section for r in rows[:4]] == ["demo"] * 4 and [r.case for r in rows[:4]] == list(STRATEGIES)
    assert {r.section for r in rows[4:]} == {"update", "generate", "sync"}
    assert rows[4].case == "plain_pytorch"  # the peer before the strategies it is the ratio's denominator for


def test_a_row_starts_only_when_the_time_left_covers_its_estimate() -> None:
    spec = RowSpec("demo", "torch_train", estimate_s=75)
    assert why_not(spec, True, 74.0, lambda _: True) == "budget: 74 s left, the row needs ~75 s"
    assert why_not(spec, True, 75.0, lambda _: True) is None
    assert why_not(spec, False, 1000.0, lambda _: True) == "no CUDA device"
    deepspeed = RowSpec("demo", "deepspeed_train", estimate_s=75)
    assert why_not(deepspeed, True, 1000.0, lambda m: m != "deepspeed") == "deepspeed is not importable here"
    smoke = RowSpec("demo", "fsdp2_train", estimate_s=75, smoke=True)
    assert why_not(smoke, False, 1000.0, lambda _: True) == "--smoke runs one row per code path"


def test_the_demo_passes_only_on_a_rise_of_the_margin() -> None:
    # CPU curve of the shipped demo (seed 42): 0.00 until step 70, 0.16 at step 120
    assert judge_demo([0.0, 0.0, 0.03, 0.16]) == (
        "failed", f"did not learn: eval accuracy 0.00 -> 0.16, needs a rise of {DEMO_MARGIN}")
    assert judge_demo([0.0, 0.03, 0.16, 0.7, 0.95])[0] == "passed"
    assert judge_demo([0.6, 0.9])[0] == "failed"  # high from the start: not shown to learn
    assert judge_demo([0.9])[0] == "failed"


def test_throughput_rows_are_judged_against_their_targets() -> None:
    plain: dict[str, float] = {}
    judge(RowSpec("update", "plain_pytorch", "0.5B"), {"tokens_per_s": 1000.0}, plain)
    slow = judge(RowSpec("update", "fsdp2_train", "0.5B"), {"tokens_per_s": 940.0}, plain)
    assert slow["ratio_vs_plain"] == pytest.approx(0.94) and slow["state"] == "below target"
    assert judge(RowSpec("update", "torch_train", "0.5B"), {"tokens_per_s": 950.0}, plain)["state"] == "passed"
    assert judge(RowSpec("sync", "torch_train", "1.5B"), {"device_buckets_s": 1.2}, plain)["state"] == "below target"
    assert judge(RowSpec("generate", "64x256", "0.5B"), {"ratio": 1.01}, plain)["state"] == "passed"
    assert judge(RowSpec("update", "torch_train", "tiny", smoke=True), {"tokens_per_s": 1.0}, {})["state"] == "smoke"


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H100 PCIe", 756.5), ("NVIDIA H100 NVL", 835.5),
    ("NVIDIA H200", 989.5), ("NVIDIA H200 NVL", 835.5), ("NVIDIA A100-SXM4-80GB", 312.0), ("Tesla T4", None),
])
def test_the_peak_follows_the_card_variant(name: str, tflops: float | None) -> None:
    # NVIDIA's data sheets, bf16 "with sparsity" halved: H100 SXM 1,979, NVL 1,671, PCIe 1,513
    assert peak_tflops(name) == tflops


def test_selftest_walks_the_run_step_without_cuda() -> None:
    done = subprocess.run(["bash", "scripts/gpu_check.sh", "selftest"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "  ok    last line: GPU CHECK INCOMPLETE" in lines
    assert "  ok    demo failed: verdict: GPU CHECK FAILED" in lines
    assert "  ok    demo passed: verdict: GPU CHECK PASSED" in lines
    assert lines[-1] == "[gpu_check] selftest passed"

