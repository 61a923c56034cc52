"""Masked and grouped statistics underlying every estimator."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.algorithms.stats import (
    clip_fraction,
    group_mean_std,
    masked_mean,
    masked_var,
    masked_whiten,
    safe_divisor,
)


def test_masked_mean_and_var_by_hand() -> None:
    values = torch.tensor([[1.0, 3.0, float("nan")], [5.0, float("inf"), 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(values, mask).item() == pytest.approx(3.0)
    assert masked_mean(values, mask, dim=-1).tolist() == [2.0, 5.0]
    assert masked_var(values, mask).item() == pytest.approx(4.0)  # unbiased var of 1, 3, 5
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(8 / 3)
    empty = torch.zeros_like(mask)
    assert masked_mean(values, empty).item() == 0.0 and masked_var(values, empty).item() == 0.0


def test_whiten_edge_cases() -> None:
    one = masked_whiten(torch.tensor([[7.0, 2.0]]), torch.tensor([[1, 0]]))
    assert one.tolist() == [[0.0, 0.0]]  # a single real entry has no spread
    kept = masked_whiten(torch.tensor([[7.0, 2.0]]), torch.tensor([[1, 0]]), shift_mean=False)
    assert kept.tolist() == [[7.0, 0.0]]
    assert masked_whiten(torch.ones(2, 2), torch.zeros(2, 2)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_group_statistics_ignore_invalid_members() -> None:
    values = torch.tensor([1.0, 3.0, 100.0, 4.0, 8.0])
    ids = torch.tensor([9, 9, 9, 2, 5])
    valid = torch.tensor([True, True, False, True, False])
    mean, std, size = group_mean_std(values, ids, valid)
    assert mean.tolist() == [2.0, 2.0, 2.0, 4.0, 0.0]  # group 5 has no valid member
    assert std.tolist() == pytest.approx([math.sqrt(2), math.sqrt(2), math.sqrt(2), 0.0, 0.0])
    assert size.tolist() == [2.0, 2.0, 2.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="group_ids must be a 1-D tensor"):
        group_mean_std(values, ids[:3])


def test_safe_divisor_and_clip_fraction() -> None:
    assert safe_divisor(torch.tensor([0.0, 2.0]), 0.5).tolist() == [1.0, 2.5]
    values = torch.tensor([[-3.0, 0.0, 9.0]])
    assert clip_fraction(values, -1.0, 1.0) == pytest.approx(2 / 3)
    assert clip_fraction(values, -1.0, 1.0, torch.tensor([[1, 1, 0]])) == pytest.approx(0.5)
    assert clip_fraction(torch.zeros(0), -1.0, 1.0) == 0.0
