"""The loop's data metrics (ours and verl's names) on a hand-computed batch."""

from __future__ import annotations

import pytest
import torch

from trainer.pipeline.metrics import data_metrics


def test_data_metrics_by_hand() -> None:
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    token_rewards = torch.tensor([[0.0, 0.0, 2.0], [-1.0, 9.0, 9.0]])  # padding values must not count
    advantages = torch.tensor([[1.0, 2.0, 3.0], [-4.0, 100.0, 100.0]])
    values = torch.tensor([[0.5, 0.5, 0.5], [1.5, 7.0, 7.0]])
    m = data_metrics(
        scores=torch.tensor([2.0, -1.0]), token_rewards=token_rewards, advantages=advantages,
        response_mask=mask, prompt_lengths=torch.tensor([5, 8]), max_prompt_length=8,
        truncated=torch.tensor([True, False]), values=values, returns=advantages + values,
    )
    assert m["critic/score/mean"] == m["reward/mean"] == 0.5
    assert (m["critic/score/max"], m["critic/score/min"]) == (2.0, -1.0)
    assert (m["critic/rewards/mean"], m["critic/rewards/max"], m["critic/rewards/min"]) == (0.5, 2.0, -1.0)
    assert m["critic/advantages/mean"] == m["advantages/mean"] == pytest.approx((1 + 2 + 3 - 4) / 4)
    assert (m["critic/advantages/max"], m["critic/advantages/min"]) == (3.0, -4.0)
    assert m["critic/values/mean"] == m["critic/values_mean"] == pytest.approx((0.5 * 3 + 1.5) / 4)
    assert m["critic/returns/max"] == 3.5 and m["critic/returns/min"] == -2.5
    assert (m["response_length/mean"], m["response_length/max"], m["response_length/min"]) == (2.0, 3.0, 1.0)
    assert m["response_length/clip_ratio"] == 0.5
    assert (m["prompt_length/mean"], m["prompt_length/max"], m["prompt_length/min"]) == (6.5, 8.0, 5.0)
    assert m["prompt_length/clip_ratio"] == 0.5


def test_data_metrics_without_critic() -> None:
    m = data_metrics(scores=torch.ones(2), token_rewards=torch.zeros(2, 1), advantages=torch.zeros(2, 1),
                     response_mask=torch.ones(2, 1), prompt_lengths=torch.tensor([3, 3]), max_prompt_length=4,
                     truncated=torch.tensor([False, False]))
    assert not [k for k in m if "values" in k or "returns" in k]
    assert m["response_length/clip_ratio"] == m["prompt_length/clip_ratio"] == 0.0
