"""Micro-batches cut by tokens instead of rows, and packed sequences (issue 36; decision 0032).

A mini-batch (or the rows of a forward-only pass) is cut into micro-batches in one of three ways:

    fixed rows     consecutive chunks of `rows` rows (the default, batch.split_rows)
    token budget   ROLL's dynamic batching / verl's use_dynamic_bsz: rows sorted by real length,
                   consecutive rows join a micro-batch while its cost stays within `max_tokens`:
                       padded (ROLL):  rows × ⌈(max prompt + max response) / round⌉ · round
                       real   (verl):  Σ (prompt + response) real tokens
    load balance   ROLL's sequence_packing_args.algorithm load_balance: k = max(min_micro_batches,
                   ⌈Σ real tokens / max_packed_length⌉) micro-batches filled longest row first into the
                   lightest one (LPT), k raised until none exceeds max_packed_length

Every micro-batch then drops the columns that are padding in all its rows (`trim_padding`), and with
packing its rows are concatenated into one sequence with position ids restarting per sample
(`pack_rows`): attention stays within each sample (trainer.models.packed_attention, or flash-attention's
varlen kernels, given the bounds), the LM head runs at the real response tokens only, and
batch.response_logits_and_logprobs / response_logprobs and value.response_values read each sample's
response back through `packed_index`. Losses are divided by the mini-batch's
global counts (ppo_update), so the summed gradient does not depend on the cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trainer.models.batch import PACKED_IDS, PACKED_INDEX, PACKED_POSITIONS


@dataclass(frozen=True)
class MicroBatching:
    """How one role cuts rows into micro-batches in one phase (train or forward)."""

    rows: int  # fixed rows per micro-batch: per_device_train_batch_size / infer_batch_size
    max_tokens: int | None = None  # token budget of one micro-batch (None: fixed rows)
    cost: Literal["padded", "real"] = "padded"  # ROLL's rows × padded length, or verl's real tokens
    round_to: int = 1  # sequence_length_round_*: padded lengths are multiples of this
    pack: bool = False  # use_sequence_packing
    balance: bool = False  # sequence_packing_args.algorithm == "load_balance"
    max_packed_length: int | None = None  # sequence_packing_args.max_packed_sequence_length_*
    min_micro_batches: int = 1  # sequence_packing_args.min_num_micro_batches_*
    field: str = ""  # the config path of the budget, for error messages


def round_up(value: int, multiple: int) -> int:
    """⌈value / multiple⌉ · multiple."""
    return -(-value // multiple) * multiple


def row_lengths(batch: dict[str, Tensor]) -> tuple[list[int], list[int]]:
    """(real prompt tokens, real response tokens) per row, from the attention mask: the prompt is
    the first W - R columns (left-padded), the response the last R (right-padded)."""
    width_r = batch["response_mask"].size(1)
    mask = batch["attention_mask"] > 0
    prompt = mask[:, :-width_r].sum(-1)
    response = mask[:, -width_r:].sum(-1)
    return prompt.tolist(), response.tolist()


def group_cost(prompt: list[int], response: list[int], rows: list[int], cost: str, round_to: int) -> int:
    """Tokens one micro-batch of `rows` costs: rows × round_up(max p + max r) (padded) or Σ (p + r) (real)."""
    if cost == "real":
        return sum(prompt[i] + response[i] for i in rows)
    return len(rows) * round_up(max(prompt[i] for i in rows) + max(response[i] for i in rows), round_to)


def token_budget_groups(prompt: list[int], response: list[int], max_tokens: int, *, cost: str = "padded",
                        round_to: int = 1, field: str = "max_tokens") -> list[list[int]]:
    """Row indices sorted by real length (p + r, shortest first), cut greedily: a row joins the current
    micro-batch while group_cost stays ≤ max_tokens, else it opens the next one (ROLL's
    dynamic_batching_shard). A row alone over the budget is an error naming `field`."""
    order = sorted(range(len(prompt)), key=lambda i: (prompt[i] + response[i], i))
    groups: list[list[int]] = []
    for i in order:
        alone = group_cost(prompt, response, [i], cost, round_to)
        if alone > max_tokens:
            raise ValueError(f"{field}={max_tokens} is below one sample's {alone} tokens "
                             f"({prompt[i]} prompt + {response[i]} response, rounded to {round_to}); raise it")
        if groups and group_cost(prompt, response, [*groups[-1], i], cost, round_to) <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def balanced_groups(lengths: list[int], count: int) -> list[list[int]]:
    """`count` groups by longest-processing-time: rows longest first, each into the group with the
    fewest tokens so far (ties: the lower index); each group's rows in ascending index order."""
    groups: list[list[int]] = [[] for _ in range(count)]
    load = [0] * count
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        g = min(range(count), key=lambda g: (load[g], g))
        groups[g].append(i)
        load[g] += lengths[i]
    return [sorted(g) for g in groups if g]


def load_balance_groups(lengths: list[int], max_len: int | None, min_count: int, *,
                        field: str = "max_packed_sequence_length") -> list[list[int]]:
    """ROLL's load_balance packing: k = max(min_count, ⌈Σ lengths / max_len⌉) balanced groups, k raised
    until every group's Σ lengths ≤ max_len (no cap without max_len)."""
    if max_len is not None and max(lengths) > max_len:
        raise ValueError(f"{field}={max_len} is below one sample's {max(lengths)} tokens; raise it")
    count = max(1, min(len(lengths), min_count))
    if max_len is not None:
        count = max(count, math.ceil(sum(lengths) / max_len))
    while True:
        groups = balanced_groups(lengths, min(count, len(lengths)))
        if max_len is None or all(sum(lengths[i] for i in g) <= max_len for g in groups):
            return groups
        count += 1


def plan_groups(batch: dict[str, Tensor], spec: MicroBatching, at_least: int = 1) -> list[list[int]]:
    """This rank's micro-batches (row indices of `batch`), at least `at_least` of them (the count the
    ranks agreed on: load balance spreads the rows over that many, the other cuts split_to_count)."""
    prompt, response = row_lengths(batch)
    rows = len(prompt)
    if spec.pack and spec.balance:
        return load_balance_groups([p + r for p, r in zip(prompt, response, strict=True)], spec.max_packed_length,
                                   max(spec.min_micro_batches, at_least), field=spec.field)
    if spec.max_tokens is not None:
        groups = token_budget_groups(prompt, response, spec.max_tokens, cost=spec.cost, round_to=spec.round_to,
                                     field=spec.field)
    else:
        size = max(1, spec.rows)
        groups = [list(range(i, min(i + size, rows))) for i in range(0, rows, size)]
    return split_to_count(groups, at_least)


def split_to_count(groups: list[list[int]], count: int) -> list[list[int]]:
    """Split the group with the most rows in two (first half, second half) until there are `count`
    groups, as ROLL evens out micro-batch counts; where no group has two rows left, empty groups
    (a forward pass whose output is dropped) make up the rest."""
    groups = [list(g) for g in groups]
    while len(groups) < count:
        largest = max(range(len(groups)), key=lambda g: (len(groups[g]), -g)) if groups else None
        if largest is None or len(groups[largest]) < 2:
            groups += [[] for _ in range(count - len(groups))]
            break
        rows = groups[largest]
        groups[largest : largest + 1] = [rows[: len(rows) // 2], rows[len(rows) // 2 :]]
    return groups


def take_rows(batch: dict[str, Tensor], rows: list[int]) -> dict[str, Tensor]:
    index = torch.tensor(rows, dtype=torch.long)
    return {k: v[index] for k, v in batch.items()}


def trim_padding(batch: dict[str, Tensor], round_to: int = 1) -> dict[str, Tensor]:
    """Drop the columns that are padding in every row: the left prompt columns before the longest
    prompt and the right response columns after the longest response, keeping the response width
    at round_up(max p + max r, round_to) - max p (at most R). Tensors as wide as the sequence are cut on
    both sides, tensors as wide as the response ([B, R, ...]: masks, advantages, old log-probs) on the
    right; 1-D tensors stay. Position ids are kept, so every real token sees the same positions."""
    width_r = batch["response_mask"].size(1)
    width = batch["attention_mask"].size(1)
    prompt, response = row_lengths(batch)
    max_p, max_r = max(prompt), max(response)
    keep_r = min(width_r, max(1, round_up(max_p + max_r, round_to) - max_p))
    left = width - width_r - max_p
    out = {}
    for key, value in batch.items():
        if value.dim() >= 2 and value.size(1) == width:
            out[key] = value[:, left : width - width_r + keep_r]
        elif value.dim() >= 2 and value.size(1) == width_r:
            out[key] = value[:, :keep_r]
        else:
            out[key] = value
    return out


def pack_rows(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The rows' real tokens concatenated into one sequence [1, T] (T = Σ (p_i + r_i)) with position ids
    0 … p_i + r_i - 1 restarting per sample, and packed_index [B, R]: the packed position whose
    output predicts response token j of row i (its token p_i + j - 1; 0 where the response has ended,
    masked anyway). Added next to the row tensors, which the losses keep reading."""
    width_r = batch["response_mask"].size(1)
    prompt, response = row_lengths(batch)
    ids, positions, index = [], [], torch.zeros(len(prompt), width_r, dtype=torch.long)
    start = 0
    width_p = batch["input_ids"].size(1) - width_r
    for i, (p, r) in enumerate(zip(prompt, response, strict=True)):
        ids.append(batch["input_ids"][i, width_p - p : width_p + r])
        positions.append(torch.arange(p + r))
        index[i, :r] = start + p - 1 + torch.arange(r)
        start += p + r
    return {**batch, PACKED_IDS: torch.cat(ids)[None], PACKED_POSITIONS: torch.cat(positions)[None],
            PACKED_INDEX: index}


def micro_batch(batch: dict[str, Tensor], rows: list[int], spec: MicroBatching) -> dict[str, Tensor]:
    """Rows `rows` of `batch` as one micro-batch: padding columns dropped, packed when spec.pack."""
    part = trim_padding(take_rows(batch, rows), spec.round_to if spec.max_tokens is not None else 1)
    return pack_rows(part) if spec.pack else part
