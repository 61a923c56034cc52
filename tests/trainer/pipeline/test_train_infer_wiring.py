"""ROLL's train_infer_correction and use_policy_loss_type: PG reach the training path (decision 0040).

The actor loss the loop builds (trainer.roles.actor.actor_loss) is compared with the formula written out here
on a real tiny model's log-probs; a real run whose engine computes in bf16 (the trainer in float32) gives
engine log-probs that differ from actor_train's, and the correction must change that run's loss."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.pipeline.conftest import load_cfg, metrics_by_step, run_local
from trainer.models.batch import build_batch, response_logits, token_logprobs
from trainer.pipeline.learner import LearnerSpec, correct_train_infer
from trainer.roles import actor as roles_actor
from trainer.train.ppo_update import normalisers_of

TEMPERATURE = 1.0


def loop_actor_loss(cfg, temperature: float, model, mb: dict[str, torch.Tensor]):
    """The loop's actor loss: the config's LossSpec, the micro-batch its own mini-batch (ppo_update's normalisers)."""
    return roles_actor.actor_loss(roles_actor.LossSpec.from_config(cfg), temperature, model, mb,
                                  norm=normalisers_of(mb))


@pytest.fixture(scope="module")
def micro(model) -> dict[str, torch.Tensor]:
    """Two prompts × two responses, old log-probs shifted so that ratios spread over [0.6, 1.7] (PPO clips
    some), advantages of both signs."""
    mb = build_batch([[5, 6, 7], [8, 9]] * 2, [[10, 11, 12], [13, 14], [15, 16, 17], [18]], pad_token_id=0)
    with torch.no_grad():
        new = token_logprobs(response_logits(model, mb, TEMPERATURE), mb["input_ids"][:, -3:])
    mb["old_log_probs"] = new + torch.tensor([[0.45, -0.3, 0.1], [-0.5, 0.3, 0.0], [0.2, -0.1, 0.35], [-0.4, 0.0, 0.0]])
    mb["advantages"] = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [-2.0] * 3])
    mb["scores"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return mb


def new_log_probs(model, mb: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return token_logprobs(response_logits(model, mb, TEMPERATURE), mb["input_ids"][:, -3:])


def loop_loss(tmp_path: Path, model, mb: dict[str, torch.Tensor], *overrides: str) -> float:
    loss, _ = loop_actor_loss(load_cfg(tmp_path, "entropy_loss_coef=0", *overrides), TEMPERATURE, model, mb)
    return float(loss.detach())


def test_the_is_weight_multiplies_each_tokens_clipped_term(tmp_path: Path, model, micro) -> None:
    """loss = mean_t w_t · max(−A r, −A clip(r, 0.8, 1.2)), w the weights the pipeline put in the batch."""
    weights = torch.tensor([[1.2, 0.5, 1.0], [0.9, 1.1, 0.0], [0.0, 1.2, 0.7], [1.05, 0.0, 0.0]])
    ratio = (new_log_probs(model, micro) - micro["old_log_probs"]).exp()
    adv, mask = micro["advantages"], micro["response_mask"] > 0
    clipped = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    got = loop_loss(tmp_path, model, {**micro, "train_infer_weights": weights})
    assert got == pytest.approx(float((weights * clipped)[mask].mean()), abs=1e-6)
    assert got != pytest.approx(float(clipped[mask].mean()), abs=1e-4)  # without the weights


def test_pg_is_minus_advantage_times_log_prob(tmp_path: Path, model, micro) -> None:
    """use_policy_loss_type: PG → mean_t −A_t log π_t (no ratio, no clip); PPO's loss and gradient differ here."""
    log_probs = new_log_probs(model, micro)
    mask = micro["response_mask"] > 0
    got = loop_loss(tmp_path, model, micro, "use_policy_loss_type=PG")
    assert got == pytest.approx(float((-micro["advantages"] * log_probs)[mask].mean()), abs=1e-6)

    def gradient(*overrides: str) -> torch.Tensor:
        model.zero_grad()
        loss, _ = loop_actor_loss(load_cfg(tmp_path, "entropy_loss_coef=0", *overrides), TEMPERATURE, model, micro)
        loss.backward()
        return model.lm_head.weight.grad.clone()

    assert not torch.allclose(gradient("use_policy_loss_type=PG"), gradient("use_policy_loss_type=PPO"))
    model.zero_grad()


def test_the_correction_touches_only_the_rows_it_is_given(tmp_path: Path) -> None:
    """Stale rows (off_policy_correction corrects them) keep their mask and weight 1; a fresh row is filtered."""
    cfg = load_cfg(tmp_path, "train_infer_correction.is_weight.enabled=true",
                   "train_infer_correction.filters=[{enabled: true, ratio_low: 0.9, ratio_high: 1.1}]")
    mask = torch.ones(2, 3, dtype=torch.long)
    old = torch.tensor([[0.0, 0.5, 0.0], [0.0, 0.5, 0.0]])  # token 1: ρ = e^0.5 ≈ 1.65 in both rows
    batch = {"response_mask": mask, "advantages": torch.ones(2, 3)}
    out, metrics = correct_train_infer(LearnerSpec.from_config(cfg), batch, mask, old, torch.zeros(2, 3), rows=torch.tensor([True, False]))
    assert out["response_mask"].tolist() == [[1, 0, 1], [1, 1, 1]]
    assert out["train_infer_weights"].tolist() == [pytest.approx([1.0, 1.2, 1.0]), [1.0, 1.0, 1.0]]
    assert metrics["actor/train_infer_masked_fraction"] == pytest.approx(1 / 3)  # of the fresh row's tokens
    assert metrics["actor/is_weight_clipfrac"] == pytest.approx(1 / 3)


def test_a_run_with_an_engine_mismatch_is_corrected(tmp_path: Path) -> None:
    """actor_infer in bf16, actor_train in float32: the engine's log-probs differ from the recompute. One optimizer
    step per rollout (no recompute needed otherwise: the correction forces it). The weight and the filter each
    change the run's policy loss; without them the loop logs no correction."""
    common = ("max_steps=1", "eval_steps=0", "save_steps=100", "actor_infer.model_args.dtype=bf16", "ppo_epochs=1",
              "actor_train.training_args.per_device_train_batch_size=16",
              "actor_train.training_args.gradient_accumulation_steps=1")
    runs = {
        "off": (),
        "weight": ("train_infer_correction.is_weight.enabled=true", "train_infer_correction.is_weight.upper_bound=null"),
        "filter": ("train_infer_correction.filters=[{enabled: true, ratio_low: 0.9995, ratio_high: 1.0005}]",),
    }
    metrics = {}
    for name, overrides in runs.items():
        assert run_local(load_cfg(tmp_path / name, *common, *overrides)) == 0
        metrics[name] = metrics_by_step(tmp_path / name)[1]
    off, weight, keep = metrics["off"], metrics["weight"], metrics["filter"]
    assert not any("train_infer" in key for key in off)
    assert weight["rollout/logprob_diff_max"] > 1e-4  # a real mismatch (float32 engine: < 6e-6)
    assert weight["actor/train_infer_is_weight_max"] > 1.0 and weight["actor/pg_loss"] != off["actor/pg_loss"]
    assert 0.0 < keep["actor/train_infer_masked_fraction"] < 1.0
    assert keep["actor/pg_loss"] != off["actor/pg_loss"]
