"""Attention inside a packed sequence without a [T, T] mask: each sample attends causally on its own.

A packed micro-batch (micro_batches.pack_rows) is one sequence of B samples, n_i = p_i + r_i tokens
each. transformers' sdpa and eager kernels see it through a dense block-diagonal mask over all
T = Σ n_i tokens: T² work instead of Σ n_i², and the masked kernel instead of the causal fast path.
Flash-attention's varlen kernels take the sample bounds instead; this module gives sdpa the same:
a packed forward passes flash-attention's keyword arguments

    cu_seq_lens_q = cu_seq_lens_k = [0, n_1, n_1 + n_2, …, T],   max_length_q = max_length_k = max n_i

(batch.varlen_kwargs) and `varlen_sdpa_attention` runs scaled_dot_product_attention with is_causal on each slice
[cu_k, cu_k+1) — the same softmax over the same keys, so the same outputs to float tolerance.
Without cu_seq_lens (an unpacked batch) it is transformers' sdpa, unchanged.

Registered with transformers as the attention implementation VARLEN_SDPA; roles that pack load
their model with it in place of sdpa (`packing_attention`, roles.common). Flash-attention models keep
their kernel, which reads the same keyword arguments; eager ignores them and keeps the dense mask.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

VARLEN_SDPA = "sdpa_varlen"


def varlen_sdpa_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                          attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs: Any) -> tuple[Tensor, None]:
    """softmax(q_s k_sᵀ · scaling + causal) v_s for each sample s of the packed sequence (query, key and
    value [1, heads, T, head_dim]); returns [1, T, heads, head_dim] as transformers' kernels do."""
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if query.size(0) != 1:
        raise ValueError(f"a packed sequence is one row; got a batch of {query.size(0)}")
    if kwargs.get("sliding_window") is not None:  # a window inside each sample needs a mask or flash-attention
        raise ValueError("this model's sliding-window attention layers cannot pack with sdpa: set "
                         "model_args.attn_implementation to flash_attention_2 (GPU) or eager")
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    cuts = bounds.tolist()
    parts = [F.scaled_dot_product_attention(query[:, :, start:end], key[:, :, start:end], value[:, :, start:end],
                                            dropout_p=dropout, scale=scaling, is_causal=True)
             for start, end in pairwise(cuts)]
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(VARLEN_SDPA, varlen_sdpa_attention)
# unpacked batches build sdpa's mask; a packed one's block mask is built too but not read
ALL_MASK_ATTENTION_FUNCTIONS.register(VARLEN_SDPA, sdpa_mask)


def packing_attention(implementation: str | None) -> str | None:
    """The attention implementation a role that packs loads its model with: VARLEN_SDPA in place of
    sdpa or the model's default; eager (asked for by name) and flash-attention (varlen already) kept."""
    return VARLEN_SDPA if implementation in (None, "sdpa") else implementation
