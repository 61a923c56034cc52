"""A light worker (no torch import unless distributed) for the worker-group tests."""

from __future__ import annotations

import os
import time
from typing import Any

import ray


class Probe:
    """Reports where and how it runs; fails on demand."""

    def __init__(self, role: str, tag: str, rank: int, world_size: int) -> None:
        self.role, self.tag, self.rank, self.world_size = role, tag, rank, world_size

    def where(self) -> dict[str, Any]:
        context = ray.get_runtime_context()
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "tag": self.tag,
            "placement_group": context.get_placement_group_id(),
            "resources": context.get_assigned_resources(),
            "env": {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")},
            "backend": torch_backend(),
        }

    def echo(self, batch: dict[str, Any], scale: int = 1) -> dict[str, Any]:
        return {"rank": self.rank, **{k: v * scale for k, v in batch.items()}}

    def fail_on(self, rank: int) -> int:
        """Rank `rank` raises; the others wait in a collective (or sleep) it never joins."""
        if self.rank == rank:
            raise ValueError(f"deliberate failure on rank {rank}")
        if torch_backend() is not None:
            import torch.distributed as dist

            dist.barrier()
        else:
            time.sleep(60)
        return self.rank


def torch_backend() -> str | None:
    """The process group's backend when this process is in one (without importing torch)."""
    import sys

    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    return dist.get_backend() if dist.is_initialized() else None
