"""Log-probs and entropy from vocabulary-sharded logits (Megatron tensor parallelism), equal to one
log-softmax over the whole vocabulary; pure tensor functions plus the two collectives that join them.

Rank r of T holds the logit columns [r·V'/T, (r+1)·V'/T) of the padded vocabulary V' ≥ V; columns at
or beyond the true vocabulary size V do not exist for the model and count as −∞. With x the logits of
one position and t its token:

    m          = max_v x_v                          (MAX all-reduce of the ranks' maxima)
    S          = Σ_v exp(x_v − m)                   ┐
    E          = Σ_v exp(x_v − m) · x_v             ├ one SUM all-reduce of the ranks' partial sums
    x_t        = the one rank holding t adds x_t    ┘ (the others add 0)
    log p(t)   = x_t − m − log S
    H          = log S + m − E / S                  (= −Σ_v p_v log p_v)

This is how the whole-vocabulary log_softmax computes, with its one sum split across ranks: the
results equal trainer.models.batch.token_logprobs and the entropy of the full logits up to the
order of floating-point additions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Reduce = Callable[[Tensor], Tensor]


def vocab_range(rank: int, shard_width: int) -> tuple[int, int]:
    """[start, end) of the padded-vocabulary columns rank `rank` holds."""
    return rank * shard_width, (rank + 1) * shard_width


def _valid_columns(shard: Tensor, vocab_start: int, vocab_size: int) -> Tensor:
    columns = torch.arange(vocab_start, vocab_start + shard.shape[-1], device=shard.device)
    return columns < vocab_size


def shard_max(shard: Tensor, vocab_start: int, vocab_size: int) -> Tensor:
    """This rank's maximum logit per position [...], padded columns excluded (−∞ if it holds none)."""
    valid = _valid_columns(shard, vocab_start, vocab_size)
    return shard.float().masked_fill(~valid, float("-inf")).amax(dim=-1)


def shard_partials(
    shard: Tensor, tokens: Tensor, vocab_start: int, vocab_size: int, global_max: Tensor
) -> Tensor:
    """This rank's (S_r, E_r, x_t·[t on r]) per position: [..., 3], to be summed over the ranks."""
    logits = shard.float()
    valid = _valid_columns(shard, vocab_start, vocab_size)
    shifted = torch.where(
        valid, torch.exp(logits - global_max.unsqueeze(-1)), torch.zeros((), device=shard.device)
    )
    sum_exp = shifted.sum(-1)
    sum_exp_x = (shifted * torch.where(valid, logits, torch.zeros((), device=shard.device))).sum(-1)
    local = tokens - vocab_start
    here = (local >= 0) & (local < shard.shape[-1])
    target = logits.gather(-1, local.clamp(0, shard.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
    return torch.stack([sum_exp, sum_exp_x, torch.where(here, target, torch.zeros_like(target))], dim=-1)


def finish(partials: Tensor, global_max: Tensor) -> tuple[Tensor, Tensor]:
    """(log p(t), H) per position from the summed partials and the global maximum."""
    sum_exp, sum_exp_x, target = partials.unbind(-1)
    log_sum = torch.log(sum_exp)
    return target - global_max - log_sum, log_sum + global_max - sum_exp_x / sum_exp


def vocab_parallel_logprobs_entropy(
    shard: Tensor,
    tokens: Tensor,
    *,
    vocab_start: int,
    vocab_size: int,
    reduce_max: Reduce,
    reduce_sum: Reduce,
) -> tuple[Tensor, Tensor]:
    """log p(tokens) and the entropy per position from this rank's logit shard [..., V'/T] (already
    divided by the sampling temperature); `reduce_max` / `reduce_sum` all-reduce a tensor over the
    tensor-parallel group (identity when it has one rank). Forward-only: no gradient flows through
    the collectives."""
    global_max = reduce_max(shard_max(shard, vocab_start, vocab_size))
    partials = reduce_sum(shard_partials(shard, tokens, vocab_start, vocab_size, global_max))
    return finish(partials, global_max)
