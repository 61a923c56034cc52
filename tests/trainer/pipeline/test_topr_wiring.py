"""ROLL's TOPR knobs reach the actor loss the loop builds (trainer.roles.actor.actor_loss):
`actor_train.pg_variant: topr` with `topr_positive_weight` / `topr_negative_weight`, and
`use_topr_neg_loss_coef`. Each loss is compared with ROLL's formula written out here in plain torch
on a real tiny model's log-probs; disconnecting a knob changes the loss and fails its test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.pipeline.conftest import load_cfg
from trainer.models.batch import build_batch, response_logits, token_logprobs
from trainer.roles import actor as roles_actor
from trainer.train.ppo_update import normalisers_of

TEMPERATURE = 1.0


def loop_actor_loss(cfg, temperature: float, model, mb: dict[str, torch.Tensor]):
    """The loop's actor loss: the config's LossSpec, the micro-batch its own mini-batch (ppo_update's normalisers)."""
    return roles_actor.actor_loss(roles_actor.LossSpec.from_config(cfg), temperature, model, mb,
                                  norm=normalisers_of(mb))


@pytest.fixture(scope="module")
def micro(model) -> dict[str, torch.Tensor]:
    """Two positive and two negative samples; ratios exp(−shift) spread over [0.6, 1.7], so some
    negative tokens have ratios above 1 (truncated) and some below."""
    mb = build_batch([[5, 6, 7], [8, 9]] * 2, [[10, 11, 12], [13, 14], [15, 16, 17], [18]], pad_token_id=0)
    with torch.no_grad():
        new = token_logprobs(response_logits(model, mb, TEMPERATURE), mb["input_ids"][:, -3:])
    shift = torch.tensor([[0.45, -0.3, 0.1], [-0.5, 0.3, 0.0], [0.2, -0.1, 0.35], [-0.4, 0.0, 0.0]])
    mb["old_log_probs"] = new + shift
    mb["advantages"] = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [-2.0] * 3])
    mb["scores"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return mb


def loop_loss(tmp_path: Path, model, micro, *overrides: str) -> float:
    cfg = load_cfg(tmp_path, "entropy_loss_coef=0", *overrides)
    loss, _ = loop_actor_loss(cfg, TEMPERATURE, model, micro)
    return float(loss.detach())


def _log_probs_and_truncated_ratio(model, mb) -> tuple[torch.Tensor, torch.Tensor]:
    log_probs = token_logprobs(response_logits(model, mb, TEMPERATURE), mb["input_ids"][:, -3:])
    return log_probs, (log_probs - mb["old_log_probs"]).exp().clamp(0.0, 1.0)


def test_pg_variant_topr_runs_rolls_per_token_topr_with_its_weights(tmp_path: Path, model, micro) -> None:
    got = loop_loss(tmp_path, model, micro, "actor_train.pg_variant=topr",
                    "actor_train.topr_positive_weight=0.5", "actor_train.topr_negative_weight=2.0")
    # ROLL: w₊·(−A·log π) on score > 0, w₋·(−clip(r, 0, 1)·A·log π) otherwise; token-mean
    mask = micro["response_mask"].bool()
    log_probs, truncated = _log_probs_and_truncated_ratio(model, micro)
    adv, positive = micro["advantages"], (micro["scores"] > 0).unsqueeze(-1)
    per_token = torch.where(positive, -0.5 * adv * log_probs, -2.0 * truncated * adv * log_probs)
    assert got == pytest.approx(float(per_token[mask].sum() / mask.sum()), abs=1e-6)
    default_weights = loop_loss(tmp_path, model, micro, "actor_train.pg_variant=topr")
    assert default_weights != pytest.approx(got, abs=1e-4)


def test_pg_variant_ppo_keeps_the_ppo_objective(tmp_path: Path, model, micro) -> None:
    assert loop_loss(tmp_path, model, micro, "actor_train.pg_variant=ppo") == loop_loss(tmp_path, model, micro)
    assert loop_loss(tmp_path, model, micro, "actor_train.pg_variant=topr") != pytest.approx(
        loop_loss(tmp_path, model, micro), abs=1e-4)


def test_use_topr_neg_loss_coef_adds_the_negative_sample_term(tmp_path: Path, model, micro) -> None:
    base = loop_loss(tmp_path, model, micro)
    got = loop_loss(tmp_path, model, micro, "use_topr_neg_loss_coef=0.7")
    mask = micro["response_mask"].bool()
    negative = mask & (micro["scores"] <= 0).unsqueeze(-1)
    log_probs, truncated = _log_probs_and_truncated_ratio(model, micro)
    # ROLL's term −clip(r, 0, 1)·A·log π over negative samples' tokens; the loop's global normaliser
    # is every real token of the mini-batch
    term = float((-truncated * micro["advantages"] * log_probs)[negative].sum() / mask.sum())
    assert abs(term) > 1e-3
    assert got == pytest.approx(base + 0.7 * term, abs=1e-6)
