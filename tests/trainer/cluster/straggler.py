"""A worker whose ranks meet in an all-reduce, one of them on demand never arriving (a hung rank)."""

from __future__ import annotations

import time


class Straggler:
    def __init__(self, role: str, rank: int, world_size: int) -> None:
        self.rank = rank

    def all_reduce(self, hung_rank: int | None) -> float:
        """The sum of one 1.0 per rank; rank `hung_rank` sleeps instead of joining."""
        import torch
        import torch.distributed as dist

        if self.rank == hung_rank:
            time.sleep(600)
        value = torch.ones(1)
        dist.all_reduce(value)
        return float(value)
