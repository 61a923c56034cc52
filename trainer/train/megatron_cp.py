"""Context parallelism (CP) for megatron_train / megatron_infer without Transformer Engine: all-gather-KV
attention, as in the Llama 3 paper (§3.3.2), docs/decisions/0058.

The padded sequence is cut into 2·cp equal chunks and CP rank r holds chunks r and 2·cp − 1 − r
(megatron-core's own convention: its rotary embedding keeps those positions on this rank,
rope_utils.get_pos_emb_on_this_cp_rank); the pairing gives every rank the same causal attention work.
Every layer's attention gathers the keys and values of all CP ranks (the gradient of a gathered key
sums the contributions of all ranks' queries) and attends this rank's queries to them under the rows
of the explicit mask (causal + padding) that belong to its positions. The last stage's output (logits
or values) and per-token log-probs are gathered back to whole sequences, so losses see what they see
with cp = 1.

Torch only (the split, its inverse, the attention formula, the gathers over the CP group given to
them); trainer.train.megatron_build's AllGatherKVAttention puts them in megatron's layer spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
from torch import Tensor

MASKED_SCORE = -10000.0  # megatron-core's attention_mask_func fills masked scores with this value


@dataclass(frozen=True)
class ContextParallel:
    """This rank's place in its CP group: the group's size, this rank's index in it, the group."""

    size: int
    rank: int
    group: Any = None


def sequence_multiple(cp: int, sequence_parallel_tp: int = 1) -> int:
    """The multiple the padded sequence length must be: 2·cp chunks (cp > 1), each rank's length a
    multiple of the TP size when sequence parallelism splits it further:
    multiple = (2·cp if cp > 1 else 1) · sequence_parallel_tp."""
    return (2 * cp if cp > 1 else 1) * sequence_parallel_tp


def zigzag_positions(width: int, cp: int, rank: int, device: torch.device | None = None) -> Tensor:
    """The sequence positions CP rank `rank` holds, in its local order: chunks rank and 2·cp − 1 − rank of
    length w = width / (2·cp), i.e. [rank·w, (rank+1)·w) followed by [(2cp−1−rank)·w, (2cp−rank)·w)."""
    if width % (2 * cp):
        raise ValueError(f"context parallelism: sequence length {width} is not a multiple of 2·cp = {2 * cp}")
    w = width // (2 * cp)
    first, second = rank * w, (2 * cp - 1 - rank) * w
    return torch.cat(
        [torch.arange(first, first + w, device=device), torch.arange(second, second + w, device=device)]
    )


def split_sequence(tensor: Tensor, cp: ContextParallel, dim: int) -> Tensor:
    """This rank's part of `tensor` along `dim` (the sequence): index_select(dim, zigzag_positions)."""
    if cp.size == 1:
        return tensor
    index = zigzag_positions(tensor.shape[dim], cp.size, cp.rank, tensor.device)
    return tensor.index_select(dim, index)


def unsplit_sequence(parts: list[Tensor] | tuple[Tensor, ...], dim: int) -> Tensor:
    """The whole sequence from every rank's part (parts[r] from CP rank r): the parts concatenated
    hold positions cat_r zigzag_positions(r); the inverse permutation (argsort) restores the order."""
    cp = len(parts)
    width = sum(part.shape[dim] for part in parts)
    order = torch.cat([zigzag_positions(width, cp, r, parts[0].device) for r in range(cp)])
    return torch.cat(list(parts), dim).index_select(dim, torch.argsort(order))


def gather_sequence(tensor: Tensor, cp: ContextParallel, dim: int) -> Tensor:
    """The whole sequence from every CP rank, differentiable as a collective: the gradient of this
    rank's part is the SUM over ranks of the gradients of its positions (all_gather's backward, a
    reduce-scatter). For keys and values, which every rank's queries read."""
    if cp.size == 1:
        return tensor
    return unsplit_sequence(dist_nn.all_gather(tensor.contiguous(), group=cp.group), dim)


class _GatherReplicated(torch.autograd.Function):
    """all_gather whose backward keeps this rank's own gradient (no sum): for outputs every CP rank
    then uses identically (each computes the same loss on the whole sequence), so each rank's gradient
    of its part is already the whole gradient."""

    @staticmethod
    def forward(ctx: Any, tensor: Tensor, cp: ContextParallel, dim: int) -> Tensor:
        ctx.cp, ctx.dim = cp, dim
        parts = [torch.empty_like(tensor) for _ in range(cp.size)]
        dist.all_gather(parts, tensor.contiguous(), group=cp.group)
        return unsplit_sequence(parts, dim)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return split_sequence(grad, ctx.cp, ctx.dim).contiguous(), None, None


def gather_replicated(tensor: Tensor, cp: ContextParallel, dim: int) -> Tensor:
    """The whole sequence on every CP rank, for a result every rank then uses identically (the last
    stage's logits, values, log-probs): the backward hands this rank the gradient of its own positions."""
    if cp.size == 1:
        return tensor
    return _GatherReplicated.apply(tensor, cp, dim)


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    masked: Tensor,
    scale: float,
    dropout: float = 0.0,
    training: bool = False,
) -> Tensor:
    """Attention of the local queries to all keys, as megatron-core's DotProductAttention computes it:

        s_ij = scale · q_i · k_j, s_ij = −10000 where masked[i, j];  p_i = softmax_j(s_i) (fp32);
        out_i = Σ_j p_ij · v_j

    masked [b, 1, sq, sk] True = key j hidden from query i: the rows of the whole sequence's causal +
    padding mask at this rank's query positions (a query at position t sees keys at positions ≤ t
    that are tokens), so the zigzag positions' offsets live in the mask. query [sq, b, hq, d];
    key, value [sk, b, hkv, d], hq a multiple of hkv (grouped-query heads share keys); returns
    [sq, b, hq·d]. A fully masked row (left padding) averages all values, as megatron's does."""
    sq, b, hq, d = query.shape
    groups = hq // key.shape[2]
    if groups > 1:
        key, value = key.repeat_interleave(groups, dim=2), value.repeat_interleave(groups, dim=2)
    scores = torch.einsum("qbhd,kbhd->bhqk", query, key).float() * scale
    scores = scores.masked_fill(masked, MASKED_SCORE)
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    if dropout > 0 and training:
        probs = torch.nn.functional.dropout(probs, p=dropout)
    out = torch.einsum("bhqk,kbhd->qbhd", probs, value)
    return out.reshape(sq, b, hq * d)
