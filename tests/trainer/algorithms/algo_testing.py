"""Random ragged batches for the algorithm tests (hypothesis draws only sizes and a seed)."""

from __future__ import annotations

import torch
from hypothesis import settings
from hypothesis import strategies as st
from torch import Tensor

# Modest example counts keep the whole algorithms suite within its time budget.
FAST = settings(max_examples=40, deadline=None)

seeds = st.integers(min_value=0, max_value=2**31 - 1)
batch_sizes = st.integers(min_value=1, max_value=7)
lengths = st.integers(min_value=1, max_value=9)


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def ragged_mask(g: torch.Generator, batch: int, length: int, holes: bool = True) -> Tensor:
    """Right-padded rows of random length (0 included), optionally with masked holes inside."""
    row_lengths = torch.randint(0, length + 1, (batch,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < row_lengths.unsqueeze(1)
    if holes:
        mask &= torch.rand(batch, length, generator=g) > 0.2
    return mask


def random_group_ids(g: torch.Generator, batch: int) -> Tensor:
    """Non-contiguous, sparse ids (groups of one and empty ids included)."""
    num_groups = int(torch.randint(1, batch + 1, (1,), generator=g))
    return torch.randint(0, num_groups, (batch,), generator=g) * 7 + 3


def perturb_masked(values: Tensor, mask: Tensor, g: torch.Generator) -> Tensor:
    """Replace masked-out entries by wild values (huge, inf, NaN); real entries untouched."""
    wild = torch.randn(values.shape, generator=g, dtype=torch.float64).to(values.dtype) * 1e6
    kinds = torch.randint(0, 3, values.shape, generator=g)
    wild = torch.where(kinds == 1, torch.full_like(wild, float("inf")), wild)
    wild = torch.where(kinds == 2, torch.full_like(wild, float("nan")), wild)
    return torch.where(mask, values, wild)
