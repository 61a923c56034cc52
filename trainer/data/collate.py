"""Padding helpers: left-padded prompts for generation, right-padded prompt+response for training."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Prompts for generation: pad on the left so every prompt ends at the last column.

    Returns `input_ids` [B, T] and `attention_mask` [B, T] (0 on padding)."""
    if not sequences:
        raise ValueError("left_pad: no sequences")
    width = max(len(s) for s in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if seq:
            input_ids[i, width - len(seq):] = torch.as_tensor(list(seq), dtype=torch.long)
            attention_mask[i, width - len(seq):] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def training_batch(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                   pad_id: int) -> dict[str, torch.Tensor]:
    """prompt+response per row, right-padded (positions then start at 0 for every row).

    Returns `input_ids`, `attention_mask`, `response_mask` (1 on response tokens; the log-prob of
    token t comes from the logits at t-1), `prompt_lengths` and `response_lengths`, all [B, T] or [B]."""
    if len(prompts) != len(responses):
        raise ValueError(f"training_batch: {len(prompts)} prompts but {len(responses)} responses")
    if not prompts:
        raise ValueError("training_batch: empty batch")
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    batch = len(prompts)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    response_mask = torch.zeros((batch, width), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        n_p, n = len(p), len(p) + len(r)
        input_ids[i, :n] = torch.as_tensor(list(p) + list(r), dtype=torch.long)
        attention_mask[i, :n] = 1
        response_mask[i, n_p:n] = 1
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "prompt_lengths": torch.tensor([len(p) for p in prompts], dtype=torch.long),
        "response_lengths": torch.tensor([len(r) for r in responses], dtype=torch.long),
    }
