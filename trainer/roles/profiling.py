"""ROLL's profiler_timeline / profiler_memory on the roles that compute (docs/decisions/0037).

The driver opens a window on a step of `profiler_steps` (`ProfiledRole.profile_step(step)` on every rank of
every computing group) and closes it after the step (`profile_step(None)`, which hands back what was written).
Inside the window each `@profiled` method call runs under:

- profiler_timeline: torch.profiler (CPU activity, and CUDA's where it exists; Python stacks, as ROLL records
  them), exported as a Chrome trace (JSON, gzip);
- profiler_memory with CUDA: the allocator's memory history, dumped as a snapshot (.pickle, for
  pytorch.org/memory_viz); on CPU, which has no such history, torch.profiler with profile_memory (allocation
  and free events with the running total in the same Chrome trace format).

Each rank writes its own file, `<profiler dir>/step_<k>/<role>_rank<r>_<call>[_<n>].<ext>`. Outside the
window (and always when profiling is off) a call pays one attribute read: no profiler object exists.
One profiler per process at a time: a call that starts while another is profiled in the same process (an
async rollout thread beside the update, both in the driver process) runs unprofiled.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

PROFILES_DIR = "profiles"  # under output_dir, when profiler_output_dir is unset
MEMORY_HISTORY_ENTRIES = 100_000  # ROLL's MAX_NUM_OF_MEM_EVENTS_PER_SNAPSHOT
TRACE_SUFFIX = ".pt.trace.json.gz"
SNAPSHOT_SUFFIX = ".memory.pickle"
_ONE_AT_A_TIME = threading.Lock()  # torch.profiler and the allocator's history are per process

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ProfileSettings:
    """What the config asks of the profiler; None from `from_config` when neither mode is on."""

    kind: str  # "timeline" | "memory"
    folder: str
    first: int
    last: int

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> ProfileSettings | None:
        if not (cfg.profiler_timeline or cfg.profiler_memory):
            return None
        first, last = cfg.profiler_steps
        return cls("timeline" if cfg.profiler_timeline else "memory", str(profile_folder(cfg)), first, last)

    def covers(self, step: int) -> bool:
        return self.first <= step <= self.last


def profile_folder(cfg: PipelineConfig) -> Path:
    """profiler_output_dir (a relative one inside output_dir, the run directory), else <output_dir>/profiles."""
    configured = cfg.profiler_output_dir
    if not configured:
        return Path(cfg.output_dir) / PROFILES_DIR
    return Path(configured) if os.path.isabs(configured) else Path(cfg.output_dir) / configured


def cuda_snapshots() -> bool:
    """Whether profiler_memory records the CUDA allocator's snapshot here (else: profile_memory on CPU)."""
    import torch

    return torch.cuda.is_available()


class ProfiledRole:
    """The window and the files of one rank (mixed into every role; the role sets `role`, `rank`, `cfg`)."""

    role: str
    rank: int
    cfg: PipelineConfig
    _profile_step: int | None = None  # the step whose calls are profiled now; None: none (the fast path)
    _profile_settings: ProfileSettings | None = None
    _profile_written: list[dict[str, Any]]  # set by the first profile_step

    def profile_step(self, step: int | None) -> list[dict[str, Any]]:
        """Profile this rank's compute calls from now on as step `step` (None: stop). Returns the files written
        since the previous call (ProfileData of trainer.telemetry.events), which the driver reports."""
        written, self._profile_written = getattr(self, "_profile_written", []), []
        self._profile_calls: dict[str, int] = {}
        self._profile_settings = ProfileSettings.from_config(self.cfg) if step is not None else None
        self._profile_step = step if self._profile_settings is not None else None
        return written

    @contextmanager
    def _profiling(self, call: str) -> Iterator[None]:
        settings, step = self._profile_settings, self._profile_step
        if settings is None or step is None or not _ONE_AT_A_TIME.acquire(blocking=False):
            yield
            return
        try:
            self._profile_calls[call] = count = self._profile_calls.get(call, 0) + 1
            name = f"{self.role}_rank{self.rank}_{call}{'' if count == 1 else f'_{count}'}"
            folder = Path(settings.folder) / f"step_{step}"
            folder.mkdir(parents=True, exist_ok=True)
            if settings.kind == "memory" and cuda_snapshots():
                with memory_snapshot(folder / f"{name}{SNAPSHOT_SUFFIX}") as path:
                    yield
                fmt = "cuda_memory_snapshot"
            else:
                with timeline(folder / f"{name}{TRACE_SUFFIX}", f"{self.role}.{call}",
                              memory=settings.kind == "memory") as path:
                    yield
                fmt = "chrome_trace_gz"
            self._profile_written.append({"path": str(path), "size_bytes": path.stat().st_size, "role": self.role,
                                          "rank": self.rank, "call": call, "kind": settings.kind, "format": fmt})
        finally:
            _ONE_AT_A_TIME.release()


def profiled(method: Callable[P, R]) -> Callable[P, R]:
    """A compute method of a role, profiled inside the driver's window (module docstring)."""
    call = method.__name__

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        role: ProfiledRole = args[0]  # type: ignore[assignment]
        if role._profile_step is None:
            return method(*args, **kwargs)
        with role._profiling(call):
            return method(*args, **kwargs)

    return wrapper


@contextmanager
def timeline(path: Path, label: str, *, memory: bool) -> Iterator[Path]:
    """torch.profiler around the block, its Chrome trace gzipped at `path` (written aside, then renamed)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with (profile(activities=activities, record_shapes=False, profile_memory=memory, with_stack=True) as prof,
          record_function(label)):
        yield path
    partial = path.with_name(f".partial-{os.getpid()}-{path.name}")  # ends in .gz: torch gzips it
    prof.export_chrome_trace(str(partial))
    os.replace(partial, path)


@contextmanager
def memory_snapshot(path: Path) -> Iterator[Path]:
    """The CUDA allocator's history over the block (with Python stacks), dumped as a snapshot at `path`."""
    import torch

    torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_ENTRIES, stacks="python")
    try:
        yield path
        partial = path.with_name(f".partial-{os.getpid()}-{path.name}")
        torch.cuda.memory._dump_snapshot(str(partial))
        os.replace(partial, path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
