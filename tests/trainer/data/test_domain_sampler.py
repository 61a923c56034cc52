"""domain_interleave_probs: ROLL's batch split over domains and per-domain streams that resume exactly
(trainer.config.topology.domain_batch_sizes, trainer.data.sampler.DomainInterleavedSampler; docs/decisions/0043)."""

from __future__ import annotations

import logging

import pytest

from trainer.config.topology import domain_batch_sizes
from trainer.data.sampler import DomainInterleavedSampler, PromptSampler

# 12 prompts: math at 0-5, code at 6-9, ifeval at 10-11, one more math (12) and one of no listed domain (13)
DOMAINS = ["math"] * 6 + ["code"] * 4 + ["ifeval"] * 2 + ["math", "chat"]
PROBS = {"math": 0.5, "code": 0.3, "ifeval": 0.2}


@pytest.mark.parametrize(("probs", "size", "expected"), [
    # ROLL's BatchStratifiedSampler docstring: (a=0.5, b=0.3, c=0.2), batch_size=10 -> int(5), int(3), 10-5-3
    ({"a": 0.5, "b": 0.3, "c": 0.2}, 10, {"a": 5, "b": 3, "c": 2}),
    ({"a": 0.5, "b": 0.3, "c": 0.2}, 8, {"a": 4, "b": 2, "c": 2}),   # int(4.0), int(2.4), 8-6
    ({"a": 0.5, "b": 0.3, "c": 0.2}, 7, {"a": 3, "b": 2, "c": 2}),   # int(3.5), int(2.1), 7-5
    ({"c": 0.2, "b": 0.3, "a": 0.5}, 7, {"c": 1, "b": 2, "a": 4}),   # listed order decides who takes the rest
    ({"a": 0.29, "b": 0.71}, 100, {"a": 28, "b": 72}),               # float: int(0.29 * 100) = int(28.999…)
    ({"only": 1.0}, 5, {"only": 5}),
])
def test_domain_batch_sizes_round_as_roll(probs: dict[str, float], size: int, expected: dict[str, int]) -> None:
    sizes = domain_batch_sizes(probs, size)
    assert sizes == expected and list(sizes) == list(probs)


def test_each_batch_takes_every_domain_share_in_listed_order_from_its_own_stream() -> None:
    sampler = DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=3)
    assert sampler.shares == {"math": 2, "code": 1, "ifeval": 2}
    batches = [sampler.next_batch() for _ in range(7)]
    for batch in batches:
        assert [DOMAINS[i] for i in batch] == ["math", "math", "code", "ifeval", "ifeval"]
    # math's stream: its 7 prompts, each once per pass (2 a batch: the first 7 draws are a permutation)
    math = [i for b in batches for i in b if DOMAINS[i] == "math"]
    assert sorted(math[:7]) == [0, 1, 2, 3, 4, 5, 12] and sorted(math[7:14]) == [0, 1, 2, 3, 4, 5, 12]
    code = [i for b in batches for i in b if DOMAINS[i] == "code"]
    assert sorted(code[:4]) == [6, 7, 8, 9]
    assert 13 not in {i for b in batches for i in b}  # chat is not listed: never drawn
    assert sampler.position == 35
    # the streams are seeded per (seed, domain): the same seed draws the same, another seed otherwise
    same, other = DomainInterleavedSampler(DOMAINS, PROBS, 5, seed=3), DomainInterleavedSampler(DOMAINS, PROBS, 5, seed=4)
    assert [same.next_batch() for _ in range(7)] == batches
    assert [other.next_batch() for _ in range(7)] != batches
    unshuffled = DomainInterleavedSampler(DOMAINS, PROBS, 5, seed=3, shuffle=False)
    assert unshuffled.next_batch() == [0, 1, 6, 10, 11] and unshuffled.next_batch() == [2, 3, 7, 10, 11]


def test_a_resumed_sampler_draws_what_the_uninterrupted_one_draws() -> None:
    uninterrupted = DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=11)
    reference = [uninterrupted.next_batch() for _ in range(9)]
    first = DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=11)
    head = [first.next_batch() for _ in range(4)]
    state = first.state_dict()
    assert state["position"] == first.position == 20
    assert {d: (s["epoch"], s["index"]) for d, s in state["domains"].items()} == {
        "math": (1, 1), "code": (1, 0), "ifeval": (4, 0)}  # math 8 of 7, code 4 of 4, ifeval 8 of 2
    resumed = DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=11)
    resumed.load_state_dict(state)
    assert resumed.position == 20
    assert head + [resumed.next_batch() for _ in range(5)] == reference


def test_a_state_of_another_layout_is_refused() -> None:
    sampler = DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=1)
    single = PromptSampler(len(DOMAINS), 5, seed=1)
    with pytest.raises(ValueError, match="it drew from one stream; this run interleaves domains"):
        sampler.load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match="it interleaves domains math, code, ifeval; this run draws from one stream"):
        single.load_state_dict(sampler.state_dict())
    other = DomainInterleavedSampler(DOMAINS, {"math": 0.6, "code": 0.2, "ifeval": 0.2}, batch_size=5, seed=1)
    with pytest.raises(ValueError, match=r"domains .* do not match this run's"):
        other.load_state_dict(sampler.state_dict())
    with pytest.raises(ValueError, match="seed=1 does not match"):
        DomainInterleavedSampler(DOMAINS, PROBS, batch_size=5, seed=2).load_state_dict(sampler.state_dict())


def test_a_listed_domain_without_prompts_or_with_fewer_than_its_share_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"domain_interleave_probs: no training prompt is in domain\(s\) llm_judge; "
                                         r"domains found \(prompts\): chat \(1\), code \(4\), ifeval \(2\), math \(7\)"):
        DomainInterleavedSampler(DOMAINS, {"math": 0.5, "llm_judge": 0.5}, batch_size=4)
    with pytest.raises(ValueError, match=r"domain ifeval has 2 prompt\(s\) for a share of 3 a batch \(rollout_batch"):
        DomainInterleavedSampler(DOMAINS, {"math": 0.5, "ifeval": 0.5}, batch_size=6)


def test_prompts_no_batch_can_draw_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trainer.data.sampler"):
        DomainInterleavedSampler([*DOMAINS, None], PROBS, batch_size=5)
    assert "2 of 15 training prompts are never drawn (1 in chat, 1 without a domain)" in caplog.text
