"""Reproducible, resumable prompt order with an explicit position (epoch, index).

Epoch e visits all samples in the order `permutation(seed, e)` (identity without shuffle); a batch
that runs past the end of an epoch continues into the next, so every batch is full. The position is
the whole state: a sampler restored from `state_dict()` yields exactly the batches the original
would have yielded next.
"""

from __future__ import annotations

import random
from typing import Any


class PromptSampler:
    def __init__(self, num_samples: int, batch_size: int, seed: int = 0, shuffle: bool = True) -> None:
        if num_samples < 1:
            raise ValueError(f"num_samples: must be >= 1, got {num_samples}")
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self.num_samples, self.batch_size, self.seed, self.shuffle = num_samples, batch_size, seed, shuffle
        self.epoch, self.index = 0, 0
        self._order = self.permutation(self.epoch)

    def permutation(self, epoch: int) -> list[int]:
        """Sample order of `epoch`, a pure function of (seed, epoch, num_samples)."""
        order = list(range(self.num_samples))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    @property
    def position(self) -> int:
        """Prompts drawn since the start of epoch 0 (epoch × num_samples + index): consecutive batches
        cover the stream positions [before, after) without a gap or an overlap."""
        return self.epoch * self.num_samples + self.index

    def next_batch(self, count: int | None = None) -> list[int]:
        """The next `count` (default `batch_size`) sample indices; advances the position."""
        size = self.batch_size if count is None else count
        batch: list[int] = []
        while len(batch) < size:
            take = min(size - len(batch), self.num_samples - self.index)
            batch.extend(self._order[self.index:self.index + take])
            self.index += take
            if self.index == self.num_samples:
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self.permutation(self.epoch)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "seed": self.seed, "num_samples": self.num_samples,
                "batch_size": self.batch_size, "shuffle": self.shuffle}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position; refuses a state from a different dataset size, seed or shuffle setting."""
        for key in ("num_samples", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"sampler state: {key}={state[key]!r} does not match this sampler's "
                                 f"{getattr(self, key)!r}; the data order would differ")
        if not 0 <= state["index"] < self.num_samples:
            raise ValueError(f"sampler state: index {state['index']} outside [0, {self.num_samples})")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self.permutation(self.epoch)
