"""The PPO update of one trained role: ppo_epochs passes over the rollout, each cut into shuffled
mini-batches (one optimizer step each) and micro-batches (one forward/backward each).

    for epoch in ppo_epochs:
        for mini in shuffle(rows) / rows_per_mini_batch:           # one optimizer step
            micro = mini / per_device_train_batch_size               # gradient accumulation
                    (or by a token budget / packed: micro_batches.py; every rank the same count)
            every micro carries the mini-batch's GLOBAL token and sequence counts (summed over the
            data-parallel ranks), so each loss is already divided by the global normaliser
            strategy.train_step(micro, loss_fn)

The shuffle is seeded by (run seed, step, epoch, data-parallel rank): a resumed run cuts the same
mini-batches as an uninterrupted one.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from trainer.config.topology import TrainShape
from trainer.models.batch import split_rows
from trainer.models.micro_batches import MicroBatching, micro_batch, plan_groups
from trainer.train.base import DataParallel, LossFn, TrainStrategy, max_over_ranks


def ppo_update(strategy: TrainStrategy, batch: dict[str, Tensor], shape: TrainShape, loss_fn: LossFn, *,
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
            attach_normalisers(micro, *global_counts(mini, dp.size, dp.group), dp.size)
            result = strategy.train_step(micro, loss_fn)
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


def attach_normalisers(micro: list[dict[str, Tensor]], global_tokens: Tensor, global_seqs: Tensor,
                       dp_size: int) -> None:
    """Add the global normalisers and the metric scale (micro-batches per rank × ranks, so that the
    partial losses the strategy and the driver average equal the mini-batch's loss) to every
    micro-batch, one value per row."""
    scale = torch.tensor(float(len(micro) * dp_size))
    for m in micro:
        rows = m["response_mask"].size(0)
        m["global_tokens"] = global_tokens.expand(rows)
        m["global_seqs"] = global_seqs.expand(rows)
        m["metric_scale"] = scale.expand(rows)
