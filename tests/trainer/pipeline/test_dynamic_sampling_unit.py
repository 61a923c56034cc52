"""fill_batch (dynamic sampling's refill) on hand-made rollouts, and the ledger records it writes."""

from __future__ import annotations

import torch

from trainer.pipeline.async_rollout import Rollout
from trainer.pipeline.dynamic_sampling import fill_batch
from trainer.pipeline.run.ledger import account
from trainer.rollout.base import Generation


def rollout(prompts: list[int], rewards: list[list[float]]) -> Rollout:
    gens = [Generation(i, k, [7, 8], [-0.1, -0.2], "eos") for i, group in enumerate(rewards) for k in range(len(group))]
    scores = torch.tensor([r for group in rewards for r in group])
    return Rollout(1, prompts, 0, gens, [f"p{prompts[g.prompt_index]}s{g.sample_index}" for g in gens], scores)


def varied(part: Rollout) -> torch.Tensor:
    """Keep samples of groups whose rewards differ (std_filter at 0)."""
    by_group: dict[int, set[float]] = {}
    for g, s in zip(part.gens, part.scores.tolist(), strict=True):
        by_group.setdefault(g.prompt_index, set()).add(s)
    return torch.tensor([len(by_group[g.prompt_index]) > 1 for g in part.gens])


def test_filtered_groups_are_replaced_in_draw_order() -> None:
    first = rollout([10, 11, 12], [[1, 0], [1, 1], [0, 0]])  # 11 and 12 carry no signal
    extras = iter([rollout([20, 21], [[0, 0], [0, 1]]), rollout([30], [[1, 0]])])
    asked: list[tuple[int, int]] = []

    def more(count: int, round_: int) -> Rollout:
        asked.append((count, round_))
        return next(extras)

    batch, left_out, stats = fill_batch(first, wanted=3, budget=8, keep_samples=varied, more=more)
    assert asked == [(2, 1), (1, 2)]  # the missing groups, round after round
    assert batch.prompt_indices == [10, 21, 30] and sorted(left_out) == [11, 12, 20]
    assert [(g.prompt_index, g.sample_index) for g in batch.gens] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert batch.responses == ["p10s0", "p10s1", "p21s0", "p21s1", "p30s0", "p30s1"]
    assert batch.scores.tolist() == [1, 0, 0, 1, 1, 0] and batch.batch_id == 1
    assert (stats.extra_prompts, stats.rounds, stats.filtered_groups, stats.filler_groups) == (3, 2, 3, 0)


def test_an_exhausted_budget_tops_the_batch_up_with_filtered_groups() -> None:
    first = rollout([10, 11], [[1, 1], [0, 1]])
    batch, left_out, stats = fill_batch(first, wanted=2, budget=1, keep_samples=varied,
                                        more=lambda count, round_: rollout([20], [[0, 0]]))
    assert batch.prompt_indices == [11, 10] and left_out == [20]  # passing first, then the earliest filtered
    assert (stats.extra_prompts, stats.filler_groups) == (1, 1)


def test_nothing_is_drawn_when_every_group_passes() -> None:
    first = rollout([10, 11], [[1, 0], [0, 1]])
    batch, left_out, stats = fill_batch(first, wanted=2, budget=8, keep_samples=varied,
                                        more=lambda count, round_: (_ for _ in ()).throw(AssertionError))
    assert batch.prompt_indices == [10, 11] and left_out == [] and stats.extra_prompts == 0


def test_the_ledger_accounts_for_extended_and_filtered_prompts() -> None:
    start = {"ev": "start", "mode": "sync", "lookahead": 0, "max_staleness": 0, "stale_samples": "drop",
             "max_steps": 1, "position": 0}
    history = [start, {"ev": "draw", "batch": 1, "prompts": [5, 6], "from": 0, "to": 2},
               {"ev": "generate", "batch": 1, "version": 0, "samples": 4},
               {"ev": "extend", "batch": 1, "prompts": [7], "from": 2, "to": 3},
               {"ev": "generate", "batch": 1, "version": 0, "samples": 2},
               {"ev": "filter", "batch": 1, "prompts": [6]},
               {"ev": "train", "batch": 1, "step": 1, "version": 0, "staleness": 0, "samples": 4, "prompts": 2},
               {"ev": "end", "step": 1, "left": []}]
    verdict = account(history)
    assert verdict.ok and (verdict.extra_prompts, verdict.filtered_prompts) == (1, 1)
    # an extension that skips stream positions loses prompts; a train record short of prompts too
    gap = [*history[:3], {**history[3], "from": 3, "to": 4}, *history[4:]]
    assert account(gap).lost_prompts == 1
    unfiltered = [r for r in history if r["ev"] != "filter"]
    assert not account(unfiltered).ok
    assert not account([*history[:5], {"ev": "filter", "batch": 1, "prompts": [9]}, *history[6:]]).ok
