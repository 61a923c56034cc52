"""Tensor layout of one RLVR batch, and the model forwards every role shares.

Each row is ``prompt (left-padded to P) + response (right-padded to R)``, so the response tokens
sit at columns ``[P, P+R)`` for every row and one slice serves the whole batch:

    input_ids, attention_mask, position_ids : [B, P+R]
    response_mask                           : [B, R]   1 on real response tokens
    logits predicting response token j      : column P - 1 + j

A packed micro-batch (micro_batches.pack_rows) carries, next to those row tensors, the rows' real
tokens as one sequence (PACKED_IDS, PACKED_POSITIONS: [1, T]) and PACKED_INDEX [B, R], the packed
position whose output predicts each response token; the forwards below then run the packed sequence.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

PACKED_IDS = "packed_input_ids"
PACKED_POSITIONS = "packed_position_ids"
PACKED_INDEX = "packed_index"


def build_batch(prompts: list[list[int]], responses: list[list[int]], pad_token_id: int) -> dict[str, Tensor]:
    """Left-pad prompts, right-pad responses, and derive masks and position ids."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    width_p = max(len(p) for p in prompts)
    width_r = max(1, max(len(r) for r in responses))
    # one tensor from padded lists (128 rows: 0.65 ms; a tensor per row and slice: 2.5 ms, on the critical path)
    rows, masks = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        left, right = width_p - len(prompt), width_r - len(response)
        rows.append([pad_token_id] * left + list(prompt) + list(response) + [pad_token_id] * right)
        masks.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
    input_ids = torch.tensor(rows, dtype=torch.long)
    attention_mask = torch.tensor(masks, dtype=torch.long)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": attention_mask[:, width_p:].float(),
    }


def response_logits(model: nn.Module, batch: dict[str, Tensor], temperature: float) -> Tensor:
    """Float logits [B, R, V] predicting each response token, divided by the sampling temperature."""
    logits = _response_outputs(model, batch).float()
    return logits / temperature if temperature > 0 else logits


def packed_response_logits(model: nn.Module, batch: dict[str, Tensor], temperature: float) -> Tensor:
    """Float logits [N, V] predicting the N real response tokens of a packed micro-batch (response_mask
    1, row-major), divided by the sampling temperature: only those positions go through the LM head
    (transformers' logits_to_keep), so neither prompt positions nor the [B, R] padding of the read-back
    cost a vocabulary-wide row. `scatter_response` puts per-token results back in [B, R]."""
    keep = batch[PACKED_INDEX][batch["response_mask"] > 0]
    positions = batch[PACKED_POSITIONS]
    out = model(input_ids=batch[PACKED_IDS], attention_mask=None, position_ids=positions, use_cache=False,
                logits_to_keep=keep, **varlen_kwargs(positions))
    logits = out.logits[0].float()
    return logits / temperature if temperature > 0 else logits


def scatter_response(values: Tensor, response_mask: Tensor) -> Tensor:
    """Per-real-token values [N] (row-major over response_mask) back to [B, R], 0 at padding."""
    real = response_mask > 0
    out = values.new_zeros(real.shape)
    out[real] = values
    return out


def response_logits_and_logprobs(model: nn.Module, batch: dict[str, Tensor],
                                 temperature: float) -> tuple[Tensor, Tensor]:
    """(logits, log p(response token) [B, R]) for a training loss: logits [B, R, V] for padded rows; for a
    packed micro-batch [N, V] at its N real response tokens only (packed_response_logits), the log-probs
    scattered back to [B, R] (0 at padding). Other per-position results of those logits (the entropy)
    become [B, R] through `per_response_token`."""
    tokens = batch["input_ids"][:, -batch["response_mask"].size(1):]
    if is_packed(batch):
        logits = packed_response_logits(model, batch, temperature)
        return logits, scatter_response(token_logprobs(logits, tokens[batch["response_mask"] > 0]),
                                        batch["response_mask"])
    logits = response_logits(model, batch, temperature)
    return logits, token_logprobs(logits, tokens)


def per_response_token(values: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """A per-position result of response_logits_and_logprobs' logits as [B, R]: as it is for padded rows,
    scattered back (0 at padding) for a packed micro-batch."""
    return scatter_response(values, batch["response_mask"]) if is_packed(batch) else values


def token_logprobs(logits: Tensor, tokens: Tensor) -> Tensor:
    """log softmax(logits)[token] per position: [B, R, V], [B, R] -> [B, R]."""
    return logits.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def response_logprobs(model: nn.Module, batch: dict[str, Tensor], temperature: float,
                      rows_per_chunk: int = 4) -> Tensor:
    """log p(response token) [B, R] at `temperature`, the logits taken to fp32 and through the
    log-softmax a few rows at a time: no [B, R, V] fp32 tensor exists at once (for a 150k
    vocabulary it is the largest tensor of a no-grad pass). Row by row, the same numbers as
    token_logprobs(response_logits(...)) bit for bit. A packed micro-batch computes only its real
    response tokens (packed_response_logits; 0 at padding)."""
    mask = batch["response_mask"]
    width_r = mask.size(1)
    tokens = batch["input_ids"][:, -width_r:]
    if is_packed(batch):
        logits = packed_response_logits(model, batch, temperature)
        real_tokens = tokens[mask > 0]
        chunk = rows_per_chunk * width_r
        return scatter_response(torch.cat([token_logprobs(rows, ids) for rows, ids in
                                           zip(logits.split(chunk), real_tokens.split(chunk), strict=True)]), mask)
    logits = _response_outputs(model, batch)
    parts = [token_logprobs(rows.float() / temperature if temperature > 0 else rows.float(), ids)
             for rows, ids in zip(logits.split(rows_per_chunk), tokens.split(rows_per_chunk), strict=True)]
    return torch.cat(parts)


def is_packed(batch: dict[str, Tensor]) -> bool:
    return PACKED_IDS in batch


def varlen_kwargs(positions: Tensor) -> dict[str, Tensor | int]:
    """Flash-attention's varlen keyword arguments for packed position ids [1, T] (restarting at 0 per
    sample), which trainer.models.packed_attention reads for sdpa too: cu_seq_lens_q/k = the sample
    bounds [0, n_1, n_1 + n_2, …, T], max_length_q/k = the longest sample."""
    starts = torch.nonzero(positions[0] == 0).flatten()
    cu = torch.cat([starts, starts.new_tensor([positions.size(1)])]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def unpack(outputs: Tensor, batch: dict[str, Tensor]) -> Tensor:
    """Per-position outputs of the packed sequence [1, T, ...] read back per sample: [B, R, ...]."""
    return outputs.flatten(0, 1)[batch[PACKED_INDEX]]


def _response_outputs(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """The model's logits predicting each response token [B, R, V], padded or packed."""
    if is_packed(batch):
        # no attention mask: the samples' bounds are in the restarting position ids (a block mask for
        # sdpa / eager) and in the varlen arguments (flash-attention, packed_attention's sdpa)
        positions = batch[PACKED_POSITIONS]
        out = model(input_ids=batch[PACKED_IDS], attention_mask=None, position_ids=positions, use_cache=False,
                    **varlen_kwargs(positions))
        return unpack(out.logits, batch)
    width_r = batch["response_mask"].size(1)
    return _forward(model, batch)[:, -width_r - 1 : -1, :]


def _forward(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    )
    return out.logits


def split_rows(batch: dict[str, Tensor], size: int) -> list[dict[str, Tensor]]:
    """Consecutive row chunks of ``size`` (the last may be shorter)."""
    rows = next(iter(batch.values())).size(0)
    return [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, rows, size)]
