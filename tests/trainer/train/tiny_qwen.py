"""A tiny random Qwen2 model, batches and a token-mean loss for strategy tests (no downloads)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import Qwen2Config, Qwen2ForCausalLM

VOCAB = 300


def tiny_qwen2(seed: int = 0, attention_dropout: float = 0.0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_dropout=attention_dropout,
    )
    return Qwen2ForCausalLM(config)


def make_batch(batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Right-padded token ids with different lengths per row; loss on every real next token."""
    input_ids = torch.randint(0, VOCAB, (batch_size, seq_len), generator=generator)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=generator)
    attention_mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def count_loss_tokens(batch: dict[str, Tensor]) -> int:
    return int(batch["attention_mask"][:, 1:].sum())


def token_mean_loss(global_tokens: int):
    """Σ_tokens NLL / global_tokens: the token-mean over the whole (all-rank) batch."""

    def loss_fn(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
        nll = -torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
        mask = batch["attention_mask"][:, 1:].float()
        loss = (nll * mask).sum() / global_tokens
        return loss, {"local_mean_nll": float((nll.detach() * mask).sum() / mask.sum())}

    return loss_fn


def split_rows(batch: dict[str, Tensor], parts: int) -> list[dict[str, Tensor]]:
    chunks = {k: v.chunk(parts) for k, v in batch.items()}
    return [{k: chunks[k][i] for k in batch} for i in range(parts)]
