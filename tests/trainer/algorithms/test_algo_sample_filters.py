"""ROLL's sample masks, query filters and response-length reward, against hand calculations of ROLL's
rules (`get_sample_level_mask`, `query_filter_fn`, `get_response_length_reward`)."""

from __future__ import annotations

import pytest
import torch

from trainer.algorithms.sample_filters import (
    error_length_keep,
    max_len_keep,
    query_filter_keep,
    response_length_reward,
    zero_variance_groups,
)


def test_max_len_keep_drops_responses_at_the_limit() -> None:
    assert max_len_keep(torch.tensor([3, 8, 8, 0]), 8).tolist() == [True, False, False, True]


def test_error_length_keep_is_rolls_rule() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5, -1.0])
    lengths = torch.tensor([900, 10, 99, 100, 10, 10])
    # right answers stay whatever their length; wrong ones only below T = 100; other scores leave (ROLL)
    assert error_length_keep(scores, lengths, 100).tolist() == [True, True, True, False, False, False]


@pytest.mark.parametrize(("length", "expected"), [(0, -0.5), (99, -0.5), (100, -0.5), (250, -0.25), (370, -0.05),
                                                  (400, 0.0), (401, 0.0), (4000, 0.0)])
def test_response_length_reward_is_rolls_ramp(length: int, expected: float) -> None:
    # −0.5·(400 − len)/(400 − 100) between 100 and 400 tokens; −0.5 below, 0 above
    assert response_length_reward(torch.tensor([length])).item() == pytest.approx(expected)


def test_std_filter_at_zero_drops_groups_of_equal_rewards() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.3])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])  # group 3 has one sample: kept, as ROLL's len == 1 rule
    keep = query_filter_keep(scores, groups, "std_filter", {"std_threshold": 0.0})
    assert keep.tolist() == [False, False, True, True, False, False, True]
    # unbiased std of (0, 1) is √0.5 ≈ 0.707: a threshold of 0.8 drops it too
    assert query_filter_keep(scores, groups, "std_filter", {"std_threshold": 0.8}).tolist()[2:4] == [False, False]
    assert query_filter_keep(scores, groups, "std_filter", {}).all()  # default −1: nothing dropped


def test_mean_filter_drops_groups_outside_the_open_band() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])  # means 1, 0.5, 0
    keep = query_filter_keep(scores, groups, "mean_filter", {"threshold_up": 1.0, "threshold_down": 0.0})
    assert keep.tolist() == [False, False, True, True, False, False]
    assert query_filter_keep(scores, groups, "no_filter", {}).all()
    with pytest.raises(ValueError, match="not known"):
        query_filter_keep(scores, groups, "top_k", {})


def test_zero_variance_groups_counts_only_kept_groups() -> None:
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    assert zero_variance_groups(scores, groups) == (2, 3)
    assert zero_variance_groups(scores, groups, torch.tensor([False, False, True, True, True, True])) == (1, 2)
