"""Sampler order and resume; padding helpers."""

from __future__ import annotations

import pytest
import torch

from trainer.data.collate import left_pad, training_batch
from trainer.data.sampler import PromptSampler


def take(sampler: PromptSampler, n: int) -> list[list[int]]:
    return [sampler.next_batch() for _ in range(n)]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def test_each_epoch_is_a_seeded_permutation() -> None:
    sampler = PromptSampler(10, batch_size=5, seed=7)
    epoch0, epoch1 = flat(take(sampler, 2)), flat(take(sampler, 2))
    assert sorted(epoch0) == sorted(epoch1) == list(range(10))
    assert epoch0 != epoch1  # reshuffled per epoch
    assert flat(take(PromptSampler(10, 5, seed=7), 2)) == epoch0
    assert flat(take(PromptSampler(10, 5, seed=8), 2)) != epoch0
    assert take(PromptSampler(4, 2, shuffle=False), 3) == [[0, 1], [2, 3], [0, 1]]


def test_batches_run_across_epochs_and_resume_exactly() -> None:
    continuous = PromptSampler(7, batch_size=3, seed=1)
    reference = take(continuous, 6)
    assert all(len(b) == 3 for b in reference)
    first = PromptSampler(7, batch_size=3, seed=1)
    head = take(first, 2)
    state = first.state_dict()
    assert (state["epoch"], state["index"]) == (0, 6)
    resumed = PromptSampler(7, batch_size=3, seed=1)
    resumed.load_state_dict(state)
    assert head + take(resumed, 4) == reference
    assert resumed.state_dict() == continuous.state_dict()


def test_state_from_another_dataset_is_refused() -> None:
    state = PromptSampler(7, 3, seed=1).state_dict()
    with pytest.raises(ValueError, match="num_samples=7 does not match this sampler's 8"):
        PromptSampler(8, 3, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="batch_size: must be >= 1"):
        PromptSampler(8, 0)


def test_left_pad_for_generation() -> None:
    out = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_training_batch_right_pads_with_response_mask() -> None:
    out = training_batch([[1, 2], [3]], [[4], [5, 6, 7]], pad_id=9)
    assert out["input_ids"].tolist() == [[1, 2, 4, 9], [3, 5, 6, 7]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert out["response_mask"].tolist() == [[0, 0, 1, 0], [0, 1, 1, 1]]
    assert torch.equal(out["response_mask"].sum(1), out["response_lengths"])
    assert out["prompt_lengths"].tolist() == [2, 1]
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        training_batch([[1], [2]], [[3]], pad_id=0)
