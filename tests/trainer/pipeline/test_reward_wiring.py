"""Every config knob of reward and advantage processing is wired (issue 22): the functions the loop
calls (trainer.pipeline.rewarding) are run on a config that sets the knob, and the result is compared
with the formula written out here in plain torch. Disconnecting a knob (e.g. `if cfg.whiten_advantages`
→ `if False`) changes the result and fails its test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.pipeline.conftest import load_cfg
from trainer.pipeline import rewarding

knobs = rewarding.RewardSpec.from_config  # the reward-processing view of a loaded config

SCORES = torch.tensor([3.0, -0.5, 1.0, -4.0, 0.25, 2.0])
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])
LENGTHS = torch.tensor([1, 3, 2, 3, 0, 3])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
TOKENS = torch.tensor([[0.5, -2.0, 9.0], [1.5, 3.0, -1.0], [4.0, 9.0, 9.0], [-0.5, 0.0, 2.5]])


def processed(tmp_path: Path, *overrides: str) -> torch.Tensor:
    cfg = load_cfg(tmp_path, *overrides)
    out, _, _ = rewarding.process_scores(knobs(cfg), SCORES, GROUPS, rewarding.RewardStats(), LENGTHS)
    return out


def masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(x − mean) / sqrt(var + 1e-8) over the real tokens, var unbiased (torch.var's default)."""
    real = x[mask > 0]
    return ((x - real.mean()) / torch.sqrt(real.var() + 1e-8)) * mask


def test_no_processing_by_default(tmp_path: Path) -> None:
    assert torch.allclose(processed(tmp_path), SCORES, atol=0)


def test_reward_clip_reaches_the_scores(tmp_path: Path) -> None:
    assert torch.allclose(processed(tmp_path, "reward_clip=1.5"), SCORES.clamp(-1.5, 1.5), atol=0)


def test_add_len_reward_reaches_the_scores(tmp_path: Path) -> None:
    # the test config's response_length 4: bonus 1 − len/4
    expected = SCORES + 1.0 - LENGTHS.float() / 4.0
    assert torch.allclose(processed(tmp_path, "add_len_reward=true"), expected)


@pytest.mark.parametrize(
    ("overrides", "mean", "std"),
    [
        (("norm_mean_type=batch", "norm_std_type=batch"), SCORES.mean(), SCORES.std()),
        (("norm_mean_type=batch",), SCORES.mean(), torch.tensor(1.0)),
        (("norm_std_type=batch",), torch.tensor(0.0), SCORES.std()),
        (("reward_norm=batch", "reward_shift=true"), SCORES.mean(), torch.tensor(1.0)),
        (("reward_norm=batch", "reward_scale=true"), torch.tensor(0.0), SCORES.std()),
    ],
    ids=["batch", "mean-only", "std-only", "reward_shift", "reward_scale"],
)
def test_batch_normalisation_knobs_reach_the_scores(tmp_path: Path, overrides: tuple[str, ...],
                                                    mean: torch.Tensor, std: torch.Tensor) -> None:
    expected = (SCORES - mean) / (std + 1e-6)
    assert torch.allclose(processed(tmp_path, *overrides), expected, atol=1e-6)


def test_group_normalisation_uses_each_samples_group(tmp_path: Path) -> None:
    expected = torch.cat([(g - g.mean()) / (g.std() + 1e-6) for g in (SCORES[:3], SCORES[3:])])
    got = processed(tmp_path, "norm_mean_type=group", "norm_std_type=group")
    assert torch.allclose(got, expected, atol=1e-6)


def test_reward_scaling_divides_by_the_running_std(tmp_path: Path) -> None:
    # first batch: the running moments are this batch's own (mean, unbiased std)
    cfg = load_cfg(tmp_path, "use_reward_scaling=true", "use_reward_norm=true")
    out, state, _ = rewarding.process_scores(knobs(cfg), SCORES, GROUPS, rewarding.RewardStats(), LENGTHS)
    assert torch.allclose(out, (SCORES - SCORES.mean()) / (SCORES.std() + 1e-6), atol=1e-5)
    again, _, _ = rewarding.process_scores(knobs(cfg), SCORES, GROUPS, state, LENGTHS)
    assert not torch.allclose(again, out)  # the state carried over: twelve samples now, not six


def test_whiten_rewards_reaches_the_token_rewards(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "whiten_rewards=true")
    assert torch.allclose(rewarding.process_token_rewards(knobs(cfg), TOKENS, MASK) * MASK, masked_whiten(TOKENS, MASK),
                          atol=1e-6)
    assert torch.equal(rewarding.process_token_rewards(knobs(load_cfg(tmp_path)), TOKENS, MASK), TOKENS)


def test_whiten_advantages_reaches_the_advantages(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "whiten_advantages=true")
    got = rewarding.process_advantages(knobs(cfg), TOKENS, MASK) * MASK
    assert torch.allclose(got, masked_whiten(TOKENS, MASK), atol=1e-6)


def test_advantage_clip_reaches_the_advantages(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "advantage_clip=1.0")
    got = rewarding.process_advantages(knobs(cfg), TOKENS, MASK)
    assert torch.equal(got * MASK, TOKENS.clamp(-1.0, 1.0) * MASK)
    assert torch.equal(rewarding.process_advantages(knobs(load_cfg(tmp_path)), TOKENS, MASK), TOKENS)
