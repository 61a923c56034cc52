"""The profiler's window on a role (trainer.roles.profiling, decision 0037): a profiled call inside the window
writes its own file (Chrome trace JSON, gzip; on CPU profiler_memory adds allocation events), calls outside
it write nothing, and with profiling off no profiler object is ever made."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainer.roles import profiling
from trainer.roles.profiling import ProfiledRole, profiled


class Toy(ProfiledRole):
    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.role, self.rank = "toy", 3
        defaults = {"profiler_output_dir": None, "profiler_timeline": False, "profiler_memory": False,
                    "profiler_steps": [2, 2]}
        self.cfg = SimpleNamespace(output_dir=str(tmp_path), **{**defaults, **settings})

    @profiled
    def work(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, x).sum()


def trace_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


def test_a_call_in_the_window_writes_a_trace_per_call_and_the_window_hands_them_back(tmp_path: Path) -> None:
    toy = Toy(tmp_path, profiler_timeline=True)
    x = torch.randn(16, 16)
    toy.work(x)  # no window yet
    assert toy.profile_step(2) == []
    assert toy.work(x) == torch.mm(x, x).sum()  # the result is the call's
    toy.work(x)
    written = toy.profile_step(None)
    toy.work(x)  # closed again
    folder = tmp_path / "profiles" / "step_2"
    assert sorted(p.name for p in folder.iterdir()) == ["toy_rank3_work.pt.trace.json.gz",
                                                        "toy_rank3_work_2.pt.trace.json.gz"]
    assert [w["path"] for w in written] == [str(folder / "toy_rank3_work.pt.trace.json.gz"),
                                            str(folder / "toy_rank3_work_2.pt.trace.json.gz")]
    assert {(w["role"], w["rank"], w["call"], w["kind"], w["format"]) for w in written} == {
        ("toy", 3, "work", "timeline", "chrome_trace_gz")}
    assert written[0]["size_bytes"] == Path(written[0]["path"]).stat().st_size > 0
    names = trace_names(Path(written[0]["path"]))
    assert {"toy.work", "aten::mm"} <= names
    assert any(n.endswith(": work") for n in names)  # the Python stack, as ROLL records it
    assert "[memory]" not in names
    assert toy.profile_step(None) == []


def test_profiler_memory_on_cpu_is_a_trace_with_allocation_events(tmp_path: Path) -> None:
    toy = Toy(tmp_path, profiler_memory=True, profiler_output_dir="prof")
    toy.profile_step(2)
    toy.work(torch.randn(64, 64))
    [written] = toy.profile_step(None)
    assert written["kind"] == "memory" and written["format"] == "chrome_trace_gz"
    assert written["path"] == str(tmp_path / "prof" / "step_2" / "toy_rank3_work.pt.trace.json.gz")
    assert "[memory]" in trace_names(Path(written["path"]))


@pytest.mark.parametrize("settings", [{}, {"profiler_timeline": True}])
def test_no_profiler_object_is_made_outside_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      settings: dict[str, bool]) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a profiler was made")

    monkeypatch.setattr(torch.profiler, "profile", refuse)
    monkeypatch.setattr(profiling, "timeline", refuse)
    toy = Toy(tmp_path, **settings)
    if not settings:
        toy.profile_step(2)  # profiling off: even an open window makes nothing
    toy.work(torch.randn(4, 4))
    assert toy.profile_step(None) == [] and not (tmp_path / "profiles").exists()


def test_a_call_that_raises_writes_nothing_and_leaves_the_profiler_free(tmp_path: Path) -> None:
    toy = Toy(tmp_path, profiler_timeline=True)
    toy.profile_step(2)
    with pytest.raises(RuntimeError):
        toy.work(torch.randn(2, 3))  # mm of 2x3 by 2x3
    toy.work(torch.randn(3, 3))
    assert [w["call"] for w in toy.profile_step(None)] == ["work"]
