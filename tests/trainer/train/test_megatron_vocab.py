"""Vocab-parallel log-probs and entropy (trainer.train.megatron_vocab) equal a plain log_softmax over
the whole vocabulary. Tensor-parallel ranks are simulated: the padded logits are split into column
shards, each shard's partial results are joined exactly as the MAX and SUM all-reduces would."""

from __future__ import annotations

import pytest
import torch

from trainer.models.batch import token_logprobs
from trainer.train.megatron_vocab import (
    finish,
    shard_max,
    shard_partials,
    vocab_parallel_logprobs_entropy,
    vocab_range,
)

VOCAB = 37


def reference(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token) and −Σ p log p from the whole vocabulary, in float64."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    return log_p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).float(), -(log_p.exp() * log_p).sum(-1).float()


def simulate(logits: torch.Tensor, tokens: torch.Tensor, tp: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad the vocabulary to a multiple of tp with junk columns (they must not count), split it over tp
    ranks, and combine the ranks' partial results as the collectives would."""
    padded = -(-VOCAB // tp) * tp
    junk = torch.full((*logits.shape[:-1], padded - VOCAB), 50.0)
    shards = torch.cat([logits, junk], dim=-1).chunk(tp, dim=-1)
    width = padded // tp
    starts = [vocab_range(rank, width)[0] for rank in range(tp)]
    global_max = torch.stack(
        [shard_max(s, start, VOCAB) for s, start in zip(shards, starts, strict=True)]
    ).amax(0)
    partials = [
        shard_partials(s, tokens, start, VOCAB, global_max) for s, start in zip(shards, starts, strict=True)
    ]
    return finish(torch.stack(partials).sum(0), global_max)


@pytest.mark.parametrize("tp", [1, 2, 3, 4, 8])
def test_simulated_ranks_equal_a_whole_vocabulary_log_softmax(tp: int) -> None:
    generator = torch.Generator().manual_seed(tp)
    logits = torch.randn(3, 5, VOCAB, generator=generator) * 4
    tokens = torch.randint(0, VOCAB, (3, 5), generator=generator)
    logprobs, entropy = simulate(logits, tokens, tp)
    expected_logprobs, expected_entropy = reference(logits, tokens)
    # float32 sums in another order: within a few ulps of the magnitudes involved (logits up to ~15)
    torch.testing.assert_close(logprobs, expected_logprobs, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy, rtol=0, atol=1e-5)
    torch.testing.assert_close(logprobs, token_logprobs(logits, tokens), rtol=0, atol=1e-5)


def test_large_logits_stay_finite_and_exact() -> None:
    logits = torch.tensor([[[1e4, 0.0, -1e4] + [0.0] * (VOCAB - 3)]])
    tokens = torch.tensor([[0]])
    logprobs, entropy = simulate(logits, tokens, 4)
    expected_logprobs, expected_entropy = reference(logits, tokens)
    assert torch.isfinite(logprobs).all() and torch.isfinite(entropy).all()
    torch.testing.assert_close(logprobs, expected_logprobs)
    torch.testing.assert_close(entropy, expected_entropy)


def test_one_rank_with_identity_collectives_equals_token_logprobs() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, VOCAB, generator=generator) / 0.7  # a sampling temperature
    tokens = torch.randint(0, VOCAB, (2, 6), generator=generator)
    logprobs, entropy = vocab_parallel_logprobs_entropy(
        logits, tokens, vocab_start=0, vocab_size=VOCAB, reduce_max=lambda t: t, reduce_sum=lambda t: t
    )
    torch.testing.assert_close(logprobs, token_logprobs(logits, tokens), rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, reference(logits, tokens)[1], rtol=0, atol=1e-5)
