"""Reproducible, resumable prompt order with an explicit position (epoch, index).

Epoch e visits all samples in the order `permutation(seed, e)` (identity without shuffle); a batch
that runs past the end of an epoch continues into the next, so every batch is full. The position is
the whole state: a sampler restored from `state_dict()` yields exactly the batches the original
would have yielded next.

`DomainInterleavedSampler` (`domain_interleave_probs`) keeps one such stream per domain, over that
domain's samples, and fills each batch with every domain's share (trainer.config.topology.
domain_batch_sizes), listed domains in order, as ROLL's per-domain generate schedulers do; its state
is every stream's position.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.config.topology import domain_batch_sizes

logger = logging.getLogger(__name__)


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
        if "domains" in state:
            raise ValueError(f"sampler state: it interleaves domains {', '.join(state['domains'])}; this run draws "
                             "from one stream (resume with the same actor_train.data_args.domain_interleave_probs)")
        for key in ("num_samples", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"sampler state: {key}={state[key]!r} does not match this sampler's "
                                 f"{getattr(self, key)!r}; the data order would differ")
        if not 0 <= state["index"] < self.num_samples:
            raise ValueError(f"sampler state: index {state['index']} outside [0, {self.num_samples})")
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self.permutation(self.epoch)


DOMAINS_KEY = "actor_train.data_args.domain_interleave_probs"


def domain_seed(seed: int, domain: str) -> int:
    """The stream seed of one domain: a pure function of (seed, domain name)."""
    return seed * 2**32 + zlib.crc32(domain.encode("utf-8"))


class DomainInterleavedSampler:
    """Batches that take `domain_batch_sizes(probs, count)` prompts from each domain's own stream.

    `domains[i]` is sample i's domain (None: none). Each listed domain has a PromptSampler over its
    samples (seeded by `domain_seed`); `next_batch` concatenates the domains' shares in listed order and
    returns dataset indices. Samples of unlisted domains are never drawn. `position` counts every prompt
    drawn (Σ of the streams' positions), so consecutive batches cover [before, after) as PromptSampler's do."""

    def __init__(self, domains: Sequence[str | None], probs: Mapping[str, float], batch_size: int, seed: int = 0,
                 shuffle: bool = True) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self.probs, self.batch_size, self.seed, self.shuffle = dict(probs), batch_size, seed, shuffle
        self.num_samples = len(domains)
        self.shares = domain_batch_sizes(self.probs, batch_size)
        found = Counter(d for d in domains if d is not None)
        missing = [d for d in self.probs if not found[d]]
        if missing:
            listing = ", ".join(f"{d} ({n})" for d, n in sorted(found.items())) or "none"
            raise ValueError(f"{DOMAINS_KEY}: no training prompt is in domain(s) {', '.join(missing)}; domains "
                             f"found (prompts): {listing}. A prompt's domain is its `domain` column, else the "
                             "reward whose tag_included lists its tag, else its tag")
        short = {d: (found[d], n) for d, n in self.shares.items() if found[d] < n}
        if short:
            raise ValueError(f"{DOMAINS_KEY}: " + "; ".join(
                f"domain {d} has {have} prompt(s) for a share of {n} a batch" for d, (have, n) in short.items())
                + f" (rollout_batch_size {batch_size}): a batch would repeat prompts; add data or lower its share")
        self.members = {d: [i for i, x in enumerate(domains) if x == d] for d in self.probs}
        self.streams = {d: PromptSampler(len(self.members[d]), max(n, 1), seed=domain_seed(seed, d), shuffle=shuffle)
                        for d, n in self.shares.items()}
        unlisted = {d: n for d, n in found.items() if d not in self.probs}
        none = len(domains) - sum(found.values())
        if unlisted or none:
            parts = [f"{n} in {d}" for d, n in sorted(unlisted.items())] + ([f"{none} without a domain"] if none else [])
            logger.warning("%s: %d of %d training prompts are never drawn (%s): their domains are not listed",
                           DOMAINS_KEY, len(domains) - sum(len(m) for m in self.members.values()), len(domains),
                           ", ".join(parts))

    @property
    def position(self) -> int:
        """Prompts drawn so far, over every domain (Σ of the streams' positions)."""
        return sum(stream.position for stream in self.streams.values())

    def next_batch(self, count: int | None = None) -> list[int]:
        """The next `count` (default `batch_size`) dataset indices: each domain's share of `count` from its
        stream, domains in listed order; advances every stream that gave prompts."""
        size = self.batch_size if count is None else count
        shares = self.shares if size == self.batch_size else domain_batch_sizes(self.probs, size)
        batch: list[int] = []
        for domain, n in shares.items():
            if n > 0:
                batch.extend(self.members[domain][j] for j in self.streams[domain].next_batch(n))
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"domains": {d: stream.state_dict() for d, stream in self.streams.items()}, "probs": dict(self.probs),
                "seed": self.seed, "shuffle": self.shuffle, "num_samples": self.num_samples,
                "batch_size": self.batch_size, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore every domain's stream; refuses a single-stream state, or one of other domains, shares, seed,
        shuffle setting or data (a domain of another size)."""
        if "domains" not in state:
            raise ValueError(f"sampler state: it drew from one stream; this run interleaves domains "
                             f"({DOMAINS_KEY}); resume without domain_interleave_probs, or start afresh")
        if list(state["domains"]) != list(self.streams) or state.get("probs") != self.probs:
            raise ValueError(f"sampler state: domains {state.get('probs')} do not match this run's {self.probs} "
                             f"({DOMAINS_KEY}); the data order would differ")
        for key in ("num_samples", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise ValueError(f"sampler state: {key}={state[key]!r} does not match this sampler's "
                                 f"{getattr(self, key)!r}; the data order would differ")
        for domain, stream in self.streams.items():
            try:
                stream.load_state_dict(state["domains"][domain])
            except ValueError as exc:
                raise ValueError(f"{exc} (domain {domain})") from None
