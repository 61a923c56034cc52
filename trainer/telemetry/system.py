"""System sampler for `system` events: process CPU %, RSS, host memory; GPU when torch is loaded.

Torch-free at import; GPU values are read only if the process already imported torch (the trainer
has, the web server has not) and CUDA is available.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path


def _rss_bytes() -> float:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return float(pages * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak if sys.platform == "darwin" else peak * 1024)


def _host_memory_used_gb() -> float | None:
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        total, available = (int(info[k].split()[0]) for k in ("MemTotal", "MemAvailable"))
        return (total - available) / 2**20
    except (OSError, KeyError, ValueError):
        return None


def gpu_values() -> dict[str, float]:
    """`gpu/<i>/util`, `gpu/<i>/memory_used_gb`, `gpu/<i>/memory_allocated_gb` via torch.cuda."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {}
    values: dict[str, float] = {}
    for i in range(torch.cuda.device_count()):
        try:
            free, total = torch.cuda.mem_get_info(i)
            values[f"gpu/{i}/memory_used_gb"] = (total - free) / 2**30
            values[f"gpu/{i}/memory_allocated_gb"] = torch.cuda.memory_allocated(i) / 2**30
            values[f"gpu/{i}/util"] = float(torch.cuda.utilization(i))  # needs pynvml / amdsmi
        except Exception:  # utilisation is optional; memory is already recorded
            continue
    return values


class SystemSampler:
    """`sample()` -> flat {key: float}; CPU % is this process's CPU time over wall time since the last call."""

    def __init__(self) -> None:
        self._last_wall = time.monotonic()
        self._last_cpu = self._cpu_seconds()

    @staticmethod
    def _cpu_seconds() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def sample(self) -> dict[str, float]:
        wall, cpu = time.monotonic(), self._cpu_seconds()
        elapsed = max(wall - self._last_wall, 1e-9)
        values = {
            "cpu/percent": 100.0 * (cpu - self._last_cpu) / elapsed,
            "cpu/count": float(os.cpu_count() or 1),
            "memory/rss_gb": _rss_bytes() / 2**30,
        }
        self._last_wall, self._last_cpu = wall, cpu
        used = _host_memory_used_gb()
        if used is not None:
            values["memory/host_used_gb"] = used
        if hasattr(os, "getloadavg"):
            values["cpu/load1"] = os.getloadavg()[0]
        values.update(gpu_values())
        return values
