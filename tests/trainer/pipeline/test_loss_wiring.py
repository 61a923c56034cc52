"""Every config knob that reaches the actor loss is wired (issue 22): the loss the loop builds from a
config (trainer.roles.actor.actor_loss) is compared with the formula written out here, in
plain torch, on a real tiny model's log-probs. Disconnecting a knob (e.g. `clip_high = clip_low`)
changes the loss and fails its test."""

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
    """Two prompts × two responses; old log-probs shifted so that ratios spread over [0.6, 1.7],
    beyond every clip range used below on both sides, with advantages of both signs."""
    prompts = [[5, 6, 7], [8, 9]] * 2
    responses = [[10, 11, 12], [13, 14], [15, 16, 17], [18]]
    mb = build_batch(prompts, responses, pad_token_id=0)
    with torch.no_grad():
        new = token_logprobs(response_logits(model, mb, TEMPERATURE), mb["input_ids"][:, -3:])
    shift = torch.tensor([[0.45, -0.3, 0.1], [-0.5, 0.3, 0.0], [0.2, -0.1, 0.35], [-0.4, 0.0, 0.0]])
    mb["old_log_probs"] = new + shift  # ratio = exp(new - old) = exp(-shift)
    mb["ref_log_probs"] = new + 0.1 * shift
    mb["advantages"] = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.5] * 3, [-2.0] * 3])
    mb["scores"] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return mb


def actor_loss(tmp_path: Path, model, micro, *overrides: str) -> float:
    cfg = load_cfg(tmp_path, *overrides)
    loss, _ = loop_actor_loss(cfg, TEMPERATURE, model, micro)
    return float(loss)


def reference_ppo(model, mb, *, low: float, high: float, dual_c: float | None = None,
                  entropy_coef: float = 0.0, rl_coef: float = 1.0) -> float:
    """PPO with clip-higher (DAPO) and dual clip (Ye et al.), token-mean over the batch:
    l_t = max(−A r, −A clip(r, 1−ε_low, 1+ε_high)); for A < 0, l_t = min(l_t, −A c);
    loss = rl_coef · mean_t l_t − entropy_coef · mean_t H_t."""
    logits = response_logits(model, mb, TEMPERATURE)
    mask = mb["response_mask"] > 0
    new = token_logprobs(logits, mb["input_ids"][:, -3:])
    ratio = (new - mb["old_log_probs"]).exp()
    adv = mb["advantages"]
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - low, 1 + high))
    if dual_c is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_c), loss)
    logp = logits.log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return float(rl_coef * loss[mask].mean() - entropy_coef * entropy[mask].mean())


def test_clip_higher_reaches_the_loss(tmp_path: Path, model, micro) -> None:
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "pg_clip=0.2", "pg_clip_high=0.28")
    assert got == pytest.approx(reference_ppo(model, micro, low=0.2, high=0.28), abs=1e-6)
    assert got != pytest.approx(reference_ppo(model, micro, low=0.2, high=0.2), abs=1e-6)  # the knob matters here


def test_clip_low_reaches_the_loss(tmp_path: Path, model, micro) -> None:
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "pg_clip=0.2", "pg_clip_low=0.1")
    assert got == pytest.approx(reference_ppo(model, micro, low=0.1, high=0.2), abs=1e-6)
    assert got != pytest.approx(reference_ppo(model, micro, low=0.2, high=0.2), abs=1e-6)


def test_dual_clip_reaches_the_loss(tmp_path: Path, model, micro) -> None:
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "dual_clip_loss=true", "clip_ratio_c=1.05")
    assert got == pytest.approx(reference_ppo(model, micro, low=0.2, high=0.2, dual_c=1.05), abs=1e-6)
    assert got != pytest.approx(reference_ppo(model, micro, low=0.2, high=0.2), abs=1e-6)


def test_entropy_and_rl_coefficients_reach_the_loss(tmp_path: Path, model, micro) -> None:
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0.3", "rl_loss_coef=0.5")
    assert got == pytest.approx(reference_ppo(model, micro, low=0.2, high=0.2, entropy_coef=0.3, rl_coef=0.5),
                                abs=1e-6)


def test_kl_loss_coefficient_reaches_the_loss(tmp_path: Path, model, micro) -> None:
    """use_kl_loss adds kl_loss_coef · mean_t k3(π, π_ref) (kl_penalty low_var_kl)."""
    without = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0")
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "use_kl_loss=true", "kl_loss_coef=0.7",
                     "kl_penalty=low_var_kl", "reference.model_args.model_name_or_path=${pretrain}",
                     "reference.device_mapping=[0]")
    new = token_logprobs(response_logits(model, micro, TEMPERATURE), micro["input_ids"][:, -3:]).detach()
    d = micro["ref_log_probs"] - new
    k3 = (d.exp() - d - 1)[micro["response_mask"] > 0].mean()
    assert got - without == pytest.approx(0.7 * float(k3), abs=1e-6)


def test_loss_agg_mode_reaches_the_loss(tmp_path: Path, model, micro) -> None:
    """seq-mean-token-mean: mean over sequences of each sequence's token mean (no clipping at ratio 1
    is not assumed: the same clipped token losses, another reduction)."""
    got = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "loss_agg_mode=seq-mean-token-mean")
    logits = response_logits(model, micro, TEMPERATURE)
    mask = micro["response_mask"]
    ratio = (token_logprobs(logits, micro["input_ids"][:, -3:]) - micro["old_log_probs"]).exp()
    adv = micro["advantages"]
    per_token = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    per_seq = (per_token * mask).sum(-1) / mask.sum(-1)
    assert got == pytest.approx(float(per_seq.mean()), abs=1e-6)


def test_topr_replaces_the_ppo_objective(tmp_path: Path, model, micro) -> None:
    ppo = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0")
    topr = actor_loss(tmp_path, model, micro, "entropy_loss_coef=0", "use_topr_loss=true")
    assert topr != pytest.approx(ppo, abs=1e-6)



def gradient(model, loss: torch.Tensor) -> torch.Tensor:
    """∂loss/∂θ over every parameter, flattened (the model's own .grad left empty)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                      for g, p in zip(grads, params, strict=True)])


@pytest.mark.parametrize("policy_loss", ["ppo", "gspo"])
def test_without_old_log_probs_the_policy_gradient_is_the_vanilla_one(tmp_path: Path, model, micro,
                                                                      policy_loss: str) -> None:
    """One optimizer step on fresh rollouts sends no old log-probs: π_old = π, so the ratio is 1 in value but
    its gradient is ∇log π. For PPO (token-mean) the gradient is that of −mean_t A_t log π_t; for GSPO it is
    not zero. A ratio built from the live log-probs on both sides, exp(lp − lp), would give no gradient."""
    fresh = {k: v for k, v in micro.items() if k != "old_log_probs"}
    cfg = load_cfg(tmp_path, "entropy_loss_coef=0", f"policy_loss={policy_loss}")
    loss, _ = loop_actor_loss(cfg, TEMPERATURE, model, fresh)
    got = gradient(model, loss)
    assert got.norm() > 1e-3
    if policy_loss == "ppo":
        mask = fresh["response_mask"] > 0
        new = token_logprobs(response_logits(model, fresh, TEMPERATURE), fresh["input_ids"][:, -3:])
        vanilla = gradient(model, -(fresh["advantages"] * new)[mask].mean())
        assert torch.allclose(got, vanilla, atol=1e-6)
