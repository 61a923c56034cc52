"""Reward-based filtering of prompt groups and dynamic sampling with replacement prompts (ROLL's
`rewards.<domain>.query_filter_config`, `is_use_additional_prompts`, `max_additional_running_prompts`;
verl's DAPO `algorithm.filter_groups` imports to these), and the per-domain length shaping of rewards
(`rewards.<domain>.response_length_penalty_coef`).

A group whose rewards fail its domain's query filter (e.g. `std_filter` with `std_threshold: 0`: all
rewards equal, no GRPO signal) never reaches the actor's loss. With `is_use_additional_prompts` the
sync loop replaces such groups: it draws `min(missing, budget left)` more prompts from the sampler,
generates and scores them, and repeats until `rollout_batch_size` groups pass or
`max_additional_running_prompts` extra prompts were drawn this step (our rounds run one after the
other, so that bound is also the number of extra prompts in flight, ROLL's meaning). Short of that,
the batch is topped up with filtered groups, which the query-filter mask keeps out of the loss, so
every batch has the same shape; when no group passed at all, the actor does not step. Every extra draw is a ledger `extend` record and every filtered
group a `filter` record, so `python -m trainer ledger` accounts for each prompt drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trainer.algorithms import sample_filters
from trainer.pipeline.async_rollout import Rollout

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

# batch ids of replacement rounds: round r generates with the seed of batch id + r·2^31, beyond any step
ROUND_SEED_STRIDE = 2**31


def reward_domain(cfg: PipelineConfig, sample: dict[str, Any]) -> str | None:
    """The reward that scores `sample` (its `tag`), as the reward role routes it: the first reward whose
    `tag_included` is empty or lists the tag."""
    for name, section in cfg.rewards.items():
        if not section.tag_included or sample.get("tag") in section.tag_included:
            return name
    return None


def sample_domain(cfg: PipelineConfig, sample: dict[str, Any]) -> str | None:
    """The domain `domain_interleave_probs` samples `sample` under, as ROLL's update_dataset_domain: its
    `domain` column when set, else the reward that scores its tag (`reward_domain`: ROLL's tag_2_domain, with
    a reward of empty tag_included as the catch-all where ROLL falls back to math_rule), else its tag."""
    if sample.get("domain") is not None:
        return str(sample["domain"])
    reward = reward_domain(cfg, sample)
    return reward if reward is not None else sample.get("tag")


def filtering_domains(cfg: PipelineConfig) -> dict[str, Any]:
    """Rewards with a query filter that can drop a group (type other than no_filter)."""
    return {name: section.query_filter_config for name, section in cfg.rewards.items()
            if section.query_filter_config is not None and section.query_filter_config.type != "no_filter"}


def query_filter_mask(cfg: PipelineConfig, samples: Sequence[dict[str, Any]], scores: Tensor,
                      group_ids: Tensor) -> Tensor | None:
    """Samples whose group passes its reward's query filter → bool [batch]; None without any filter."""
    filters = filtering_domains(cfg)
    if not filters:
        return None
    domains = [reward_domain(cfg, s) for s in samples]
    keep = torch.ones(len(samples), dtype=torch.bool)
    for name, rule in filters.items():
        rows = torch.tensor([d == name for d in domains], dtype=torch.bool)
        if bool(rows.any()):
            keep[rows] = sample_filters.query_filter_keep(scores[rows], group_ids[rows], rule.type, rule.filter_args)
    return keep


def length_reward_terms(cfg: PipelineConfig, samples: Sequence[dict[str, Any]], response_lengths: Tensor) -> Tensor | None:
    """coef_d(i)·ρ(len_i) per sample, added to the reward before normalisation (ROLL adds it to the
    response-level reward, not to the 0/1 `scores` the masks and TOPR read); None when every
    `response_length_penalty_coef` is 0. ρ: sample_filters.response_length_reward."""
    coefs = {name: section.response_length_penalty_coef for name, section in cfg.rewards.items()}
    if not any(coefs.values()):
        return None
    per_sample = torch.tensor([coefs.get(reward_domain(cfg, s) or "", 0.0) for s in samples], dtype=torch.float32)
    return per_sample * sample_filters.response_length_reward(response_lengths)


@dataclass
class Refill:
    """What dynamic sampling did for one batch (logged as rollout/* metrics)."""

    extra_prompts: int = 0
    rounds: int = 0
    filtered_groups: int = 0
    filler_groups: int = 0  # filtered groups kept in the batch (out of the loss): the budget ran out

    def metrics(self, batch_groups: int) -> dict[str, float]:
        return {"rollout/extra_prompts": float(self.extra_prompts), "rollout/refill_rounds": float(self.rounds),
                "rollout/filtered_groups": float(self.filtered_groups),
                "rollout/filler_group_fraction": self.filler_groups / max(batch_groups, 1)}


def group_verdicts(rollout: Rollout, keep_samples: Callable[[Rollout], Tensor]) -> list[bool]:
    """Per prompt of `rollout` (its order): whether the group passes, from the per-sample mask."""
    keep = keep_samples(rollout)
    verdict = [True] * len(rollout.prompt_indices)
    for g, kept in zip(rollout.gens, keep.tolist(), strict=True):
        verdict[g.prompt_index] = verdict[g.prompt_index] and kept
    return verdict


def fill_batch(first: Rollout, *, wanted: int, budget: int, keep_samples: Callable[[Rollout], Tensor],
               more: Callable[[int, int], Rollout]) -> tuple[Rollout, list[int], Refill]:
    """Replace the groups of `first` that fail `keep_samples` with groups of extra prompts.

    more(count, round) draws `count` prompts and returns their scored rollout. Returns the batch (the
    first `wanted` passing groups in draw order, topped up with filtered ones when the budget of
    `budget` extra prompts ran out), the dataset indices of the groups left out, and the statistics."""
    parts, stats = [first], Refill()
    verdicts = [group_verdicts(first, keep_samples)]
    while sum(map(sum, verdicts)) < wanted and stats.extra_prompts < budget:
        count = min(wanted - sum(map(sum, verdicts)), budget - stats.extra_prompts)
        stats.rounds += 1
        stats.extra_prompts += count
        parts.append(more(count, stats.rounds))
        verdicts.append(group_verdicts(parts[-1], keep_samples))
    passing = [(p, j) for p, v in zip(parts, verdicts, strict=True) for j, ok in enumerate(v) if ok]
    failing = [(p, j) for p, v in zip(parts, verdicts, strict=True) for j, ok in enumerate(v) if not ok]
    chosen = passing[:wanted] + failing[:max(0, wanted - len(passing))]
    stats.filler_groups = max(0, wanted - len(passing))
    stats.filtered_groups = len(failing)
    order = {(id(p), j): k for k, (p, j) in enumerate(chosen)}
    left_out = [p.prompt_indices[j] for p, j in passing[wanted:] + failing[stats.filler_groups:]]
    return _merge(first, parts, chosen, order), left_out, stats


def _merge(first: Rollout, parts: list[Rollout], chosen: list[tuple[Rollout, int]],
           order: dict[tuple[int, int], int]) -> Rollout:
    """One rollout of the chosen groups, in `chosen` order, prompt_index renumbered to that order."""
    rows: list[tuple[int, int, Any, str, Tensor]] = []
    for part in parts:
        for g, response, score in zip(part.gens, part.responses, part.scores, strict=True):
            k = order.get((id(part), g.prompt_index))
            if k is not None:
                rows.append((k, g.sample_index, g, response, score))
    rows.sort(key=lambda row: (row[0], row[1]))
    gens = []
    for k, _, g, _, _ in rows:
        g.prompt_index = k
        gens.append(g)
    return Rollout(first.batch_id, [p.prompt_indices[j] for p, j in chosen], first.version, gens,
                   [row[3] for row in rows], torch.stack([row[4] for row in rows]),
                   generate_s=sum(p.generate_s for p in parts), reward_s=sum(p.reward_s for p in parts))


def refill(cfg: PipelineConfig, rollout: Rollout, *, records: Sequence[dict[str, Any]], sampler: Any, ledger: Any,
           collect: Callable[[int, list[int], int], Rollout]) -> tuple[Rollout, dict[str, float]]:
    """`is_use_additional_prompts`: batch `rollout.batch_id` with its filtered groups replaced (fill_batch),
    every extra draw recorded (`extend`, `generate`) and the groups left out too (`filter`).
    `records`: the training prompts by dataset index; collect(batch_id, prompts, version) as the loop's."""
    def keep_samples(part: Rollout) -> Tensor:
        samples = [records[part.prompt_indices[g.prompt_index]] for g in part.gens]
        group_ids = torch.tensor([g.prompt_index for g in part.gens], dtype=torch.long)
        mask = query_filter_mask(cfg, samples, part.scores, group_ids)
        return torch.ones(len(part.gens), dtype=torch.bool) if mask is None else mask

    def more(count: int, round_: int) -> Rollout:
        before = sampler.position
        prompts = sampler.next_batch(count)
        ledger.record("extend", batch=rollout.batch_id, prompts=prompts, **{"from": before, "to": sampler.position})
        extra = collect(rollout.batch_id + round_ * ROUND_SEED_STRIDE, prompts, rollout.version)
        ledger.record("generate", batch=rollout.batch_id, version=rollout.version, samples=len(extra.gens))
        return extra

    batch, left_out, stats = fill_batch(rollout, wanted=len(rollout.prompt_indices),
                                        budget=cfg.max_additional_running_prompts, keep_samples=keep_samples,
                                        more=more)
    if left_out:
        ledger.record("filter", batch=rollout.batch_id, prompts=left_out)
    # reward/mean is the trained batch's, which the filter biases (solved groups are left out): the step's own
    # prompts before any replacement are what reward/mean measures without dynamic sampling
    return batch, {**stats.metrics(len(batch.prompt_indices)), "rollout/drawn_reward_mean": float(rollout.scores.mean())}


def zero_variance_metrics(scores: Tensor, group_ids: Tensor, keep: Tensor) -> dict[str, float]:
    """`rollout/zero_variance_group_fraction`: of the groups the actor's loss sees (a kept sample), those
    whose raw rewards are all equal — no GRPO signal (0 with a std_filter at 0 and dynamic sampling)."""
    flat, groups = sample_filters.zero_variance_groups(scores, group_ids, keep)
    return {"rollout/zero_variance_group_fraction": flat / max(groups, 1)}
