"""Loss aggregation: a [batch, response_len] loss matrix → one scalar (knob `loss_agg_mode`).

Data parallelism: each rank aggregates its own shard, and the strategy SUMS gradients over ranks
(docs/decisions/0001). For that sum to equal the single-process loss, every normaliser must be the
GLOBAL one: pass `global_num_tokens` (real tokens in the whole optimizer-step batch, all ranks and
micro-batches) and `global_num_seqs` (sequences with at least one real token, same scope). Left
as None they default to this call's local counts, which is right for a single process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from trainer.algorithms.stats import as_bool_mask, check_same_shape, fill_masked, masked_mean, masked_sum


def _num_tokens(mask: Tensor, global_num_tokens: float | None) -> Tensor | float:
    count = as_bool_mask(mask).sum() if global_num_tokens is None else global_num_tokens
    return count.clamp(min=1) if isinstance(count, Tensor) else max(float(count), 1.0)


def _num_seqs(mask: Tensor, global_num_seqs: float | None) -> Tensor | float:
    count = as_bool_mask(mask).any(-1).sum() if global_num_seqs is None else global_num_seqs
    return count.clamp(min=1) if isinstance(count, Tensor) else max(float(count), 1.0)


def _weighted(loss_mat: Tensor, weights: Tensor | None) -> Tensor:
    return loss_mat if weights is None else loss_mat * weights.unsqueeze(-1)


def token_mean(
    loss_mat: Tensor, mask: Tensor, *, global_num_tokens: float | None = None, weights: Tensor | None = None
) -> Tensor:
    """`token-mean`: Σ_i Σ_t w_i·l_it·m_it / N_tokens (N_tokens global under data parallelism)."""
    return masked_sum(_weighted(loss_mat, weights), mask) / _num_tokens(mask, global_num_tokens)


def token_sum(loss_mat: Tensor, mask: Tensor, *, weights: Tensor | None = None) -> Tensor:
    """`token-sum`: Σ_i Σ_t w_i·l_it·m_it (no normaliser; shard sums add up by construction)."""
    return masked_sum(_weighted(loss_mat, weights), mask)


def seq_mean_token_sum(
    loss_mat: Tensor, mask: Tensor, *, global_num_seqs: float | None = None, weights: Tensor | None = None
) -> Tensor:
    """`seq-mean-token-sum`: Σ_i w_i·(Σ_t l_it·m_it) / N_seqs."""
    per_seq = masked_sum(loss_mat, mask, dim=-1)
    return _weighted(per_seq.unsqueeze(-1), weights).sum() / _num_seqs(mask, global_num_seqs)


def seq_mean_token_mean(
    loss_mat: Tensor, mask: Tensor, *, global_num_seqs: float | None = None, weights: Tensor | None = None
) -> Tensor:
    """`seq-mean-token-mean`: Σ_i w_i·(Σ_t l_it·m_it / n_i) / N_seqs; a row with n_i = 0 adds 0."""
    per_seq = masked_mean(loss_mat, mask, dim=-1)
    return _weighted(per_seq.unsqueeze(-1), weights).sum() / _num_seqs(mask, global_num_seqs)


def seq_mean_token_sum_norm(
    loss_mat: Tensor,
    mask: Tensor,
    *,
    global_num_seqs: float | None = None,
    norm_length: int | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    """`seq-mean-token-sum-norm` (Dr.GRPO): Σ_i w_i·(Σ_t l_it·m_it) / (N_seqs · L).

    L is a constant (`norm_length`, e.g. `response_length` from the config; default: the padded
    width of loss_mat), so long and short responses get the same per-token weight. ROLL and verl
    divide by L only, without the 1/N_seqs of the name and of the Dr.GRPO paper; we follow the paper.
    """
    length = loss_mat.shape[-1] if norm_length is None else norm_length
    if length <= 0:
        raise ValueError(f"norm_length must be a positive number of tokens, got {length}")
    return seq_mean_token_sum(loss_mat, mask, global_num_seqs=global_num_seqs, weights=weights) / length


@dataclass(frozen=True)
class LossAgg:
    """How to reduce a loss matrix: the mode name and the data-parallel normalisers.

    Build one per micro-batch: `LossAgg("token-mean", global_num_tokens=n)`. `weights` passed at
    call time are per-sequence loss weights [batch] (difficulty / length weights).
    """

    mode: str = "token-mean"
    global_num_tokens: float | None = None
    global_num_seqs: float | None = None
    norm_length: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode {self.mode!r} is not known; valid: {', '.join(LOSS_AGG_MODES)}")

    def __call__(self, loss_mat: Tensor, mask: Tensor, weights: Tensor | None = None) -> Tensor:
        return agg_loss(
            loss_mat,
            mask,
            self.mode,
            global_num_tokens=self.global_num_tokens,
            global_num_seqs=self.global_num_seqs,
            norm_length=self.norm_length,
            weights=weights,
        )


# The `loss_agg_mode` names fixed in docs/decisions/0001, each with its reducer.
LOSS_AGG_MODES: dict[str, Callable[..., Tensor]] = {
    "token-mean": token_mean,
    "token-sum": token_sum,
    "seq-mean-token-sum": seq_mean_token_sum,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    *,
    global_num_tokens: float | None = None,
    global_num_seqs: float | None = None,
    norm_length: int | None = None,
    weights: Tensor | None = None,
) -> Tensor:
    """Dispatch on `mode` (a key of LOSS_AGG_MODES). Masked entries never reach the result."""
    check_same_shape(loss_mat=loss_mat, mask=mask)
    loss_mat = fill_masked(loss_mat, mask)
    if mode == "token-mean":
        return token_mean(loss_mat, mask, global_num_tokens=global_num_tokens, weights=weights)
    if mode == "token-sum":
        return token_sum(loss_mat, mask, weights=weights)
    if mode == "seq-mean-token-sum":
        return seq_mean_token_sum(loss_mat, mask, global_num_seqs=global_num_seqs, weights=weights)
    if mode == "seq-mean-token-mean":
        return seq_mean_token_mean(loss_mat, mask, global_num_seqs=global_num_seqs, weights=weights)
    if mode == "seq-mean-token-sum-norm":
        return seq_mean_token_sum_norm(
            loss_mat, mask, global_num_seqs=global_num_seqs, norm_length=norm_length, weights=weights
        )
    raise ValueError(f"loss_agg_mode {mode!r} is not known; valid: {', '.join(LOSS_AGG_MODES)}")
