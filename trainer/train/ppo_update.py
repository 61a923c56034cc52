"""The PPO update of one trained role: ppo_epochs passes over the rollout, each cut into shuffled
mini-batches (one optimizer step each) and micro-batches (one forward/backward each).

    for epoch in ppo_epochs:
        for mini in shuffle(rows) / rows_per_mini_batch:           # one optimizer step
            micro = mini / per_device_train_batch_size               # gradient accumulation
                    (or by a token budget / packed: micro_batches.py; every rank the same count)
            norm = the mini-batch's GLOBAL token and sequence counts (summed over the data-parallel
                   ranks), passed to the loss as an argument: each loss is already divided by them
            strategy.train_step(micro, partial(loss_fn, norm=norm))

The shuffle is seeded by (run seed, step, epoch, data-parallel rank): a resumed run cuts the same
mini-batches as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist
from torch import Tensor

from trainer.config.topology import TrainShape
from trainer.models.batch import split_rows
from trainer.models.micro_batches import MicroBatching, micro_batch, plan_groups
from trainer.train.base import DataParallel, TrainStrategy, max_over_ranks


@dataclass(frozen=True)
class Normalisers:
    """The loss normalisers of one mini-batch (one optimizer step), the same for each of its micro-batches:
    real tokens and non-empty sequences summed over the data-parallel ranks, and the metric scale
    (micro-batches per rank × ranks, so that the partial losses the strategy and the driver average equal
    the mini-batch's loss)."""

    tokens: float
    seqs: float
    metric_scale: float = 1.0


NormalisedLossFn = Callable[..., tuple[Tensor, dict[str, float]]]
"""(model, micro_batch, *, norm: Normalisers) -> (loss divided by the global normaliser, float metrics);
ppo_update binds `norm` per mini-batch, which leaves the strategies' `LossFn` (model, micro_batch)."""


def ppo_update(strategy: TrainStrategy, batch: dict[str, Tensor], shape: TrainShape, loss_fn: NormalisedLossFn, *,
               seed: int, step: int, micro_batching: MicroBatching | None = None) -> dict[str, float]:
    """Every optimizer step of one rollout's update on this rank; the strategy's metrics averaged
    over the steps (`loss` as the global objective: this rank's share × data-parallel size).
    `micro_batching` (None: fixed rows of shape.micro_batch) cuts each mini-batch by tokens or packs it."""
    rows, _ = strategy.join_model_parallel_rows(batch)
    dp = strategy.data_parallel
    totals: dict[str, list[float]] = {}
    for epoch in range(shape.ppo_epochs):
        order_seed = seed * 1_000_003 + step * 101 + epoch * 7 + dp.rank
        for mini in mini_batches(rows, shape, order_seed):
            micro = (split_rows(mini, shape.micro_batch) if micro_batching is None
                     else cut_micro_batches(mini, micro_batching, dp))
            tokens, seqs = global_counts(mini, dp.size, dp.group)
            norm = Normalisers(float(tokens), float(seqs), metric_scale=float(len(micro) * dp.size))
            result = strategy.train_step(micro, partial(loss_fn, norm=norm))
            result["loss"] = result["loss"] * dp.size
            for key, value in result.items():
                totals.setdefault(key, []).append(float(value))
    return {key: sum(values) / len(values) for key, values in totals.items()}


def mini_batches(rows: dict[str, Tensor], shape: TrainShape, seed: int) -> list[dict[str, Tensor]]:
    """The rows in a seeded random order, cut into mini-batches of shape.rows_per_mini_batch."""
    count = rows["response_mask"].size(0)
    per_rank = shape.rows_per_mini_batch
    if count % per_rank:
        raise ValueError(
            f"{shape.role}.training_args: this rank holds {count} samples, not a multiple of "
            f"per_device_train_batch_size × gradient_accumulation_steps = {per_rank}"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return [{k: v[order[i : i + per_rank]] for k, v in rows.items()} for i in range(0, count, per_rank)]


def cut_micro_batches(mini: dict[str, Tensor], spec: MicroBatching, dp: DataParallel) -> list[dict[str, Tensor]]:
    """The mini-batch cut as `spec` says, in as many micro-batches as the rank with the most (ranks hold
    the same number of rows per mini-batch, so splitting the largest micro-batches always gets there)."""
    groups = plan_groups(mini, spec)
    if dp.size > 1:
        count = max_over_ranks(len(groups), dp.group)
        if count != len(groups):
            groups = plan_groups(mini, spec, at_least=count)
    return [micro_batch(mini, rows, spec) for rows in groups]


def global_counts(mini: dict[str, Tensor], dp_size: int, dp_group: object) -> tuple[Tensor, Tensor]:
    """Real tokens and non-empty sequences of this mini-batch, summed over the data-parallel ranks."""
    mask = mini["response_mask"] > 0
    counts = torch.stack([mask.sum(), mask.any(-1).sum()]).float()
    if dp_size > 1 and dist.is_initialized():
        dist.all_reduce(counts, group=dp_group)
    return counts[0], counts[1]


def normalisers_of(rows: dict[str, Tensor]) -> Normalisers:
    """One micro-batch that is its own mini-batch on one rank (no data parallelism): its own counts."""
    mask = rows["response_mask"] > 0
    return Normalisers(float(mask.sum()), float(mask.any(-1).sum()))
