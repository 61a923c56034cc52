"""The actor and critic loss functions handed to a training strategy (``LossFn``).

Each micro-batch carries ``global_tokens`` / ``global_seqs`` (counts of the whole optimizer-step
mini-batch over every data-parallel rank) so that the aggregated loss is already divided by the
GLOBAL normaliser, and ``metric_scale`` (micro-batches per rank x ranks) so that the partial loss
values reported per micro-batch, averaged by the strategy and the driver, equal the mini-batch's
true loss.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from trainer.algorithms import kl as kl_algos
from trainer.algorithms import policy_loss as pl
from trainer.algorithms.aggregation import LossAgg
from trainer.models.value import response_values
from trainer.pipeline.batch import response_logits, token_logprobs

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


def _agg(cfg: PipelineConfig, mb: dict[str, Tensor]) -> LossAgg:
    return LossAgg(
        cfg.loss_agg_mode,
        global_num_tokens=float(mb["global_tokens"][0]),
        global_num_seqs=float(mb["global_seqs"][0]),
        norm_length=cfg.response_length,
    )


# verl's names for the same quantities, logged next to ours (`actor/<name>`)
VERL_ACTOR_METRICS = {"clipfrac": "pg_clipfrac", "clipfrac_lower": "pg_clipfrac_lower"}


def make_actor_loss(cfg: PipelineConfig, temperature: float) -> Any:
    """The policy loss the config names (`ppo`, `gspo`, or `topr` with `use_topr_loss`), each with the
    clip range `pg_clip_low`/`pg_clip_high` (else `pg_clip`), plus the entropy and KL terms.

    A micro-batch may carry `sample_weights` [batch] (difficulty / length loss weights): they weight
    the policy-gradient term only, as ROLL does, not the entropy or KL terms."""
    clip_low = cfg.pg_clip_low if cfg.pg_clip_low is not None else cfg.pg_clip
    clip_high = cfg.pg_clip_high if cfg.pg_clip_high is not None else cfg.pg_clip
    name = "topr" if cfg.use_topr_loss else cfg.policy_loss

    def loss_fn(model: nn.Module, mb: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        mask = mb["response_mask"]
        logits = response_logits(model, mb, temperature)
        log_probs = token_logprobs(logits, mb["input_ids"][:, -mask.size(1):])
        agg = _agg(cfg, mb)
        # absent when this is the only update on fresh rollouts: then π_old = π (ratio 1, exact)
        old = mb["old_log_probs"] if "old_log_probs" in mb else log_probs.detach()
        weights = mb.get("sample_weights")
        if name == "ppo":
            out = pl.ppo_policy_loss(
                log_probs, old, mb["advantages"], mask, clip_low=clip_low, clip_high=clip_high,
                dual_clip_c=cfg.clip_ratio_c if cfg.dual_clip_loss else None, agg=agg, sample_weights=weights,
            )
        elif name == "gspo":
            out = pl.gspo_policy_loss(log_probs, old, mb["advantages"], mask, clip_low=clip_low,
                                      clip_high=clip_high, agg=agg, sample_weights=weights)
        else:
            out = pl.topr_policy_loss(log_probs, old, mb["advantages"], mask, mb["scores"], agg=agg,
                                      sample_weights=weights)
        entropy = pl.entropy_loss(logits, mask, agg)
        kl_term = None
        if cfg.use_kl_loss:
            kl_term = kl_algos.kl_loss(log_probs, mb["ref_log_probs"], mask, cfg.kl_penalty, agg)
        total = pl.actor_loss(
            out.loss, rl_loss_coef=cfg.rl_loss_coef,
            kl=kl_term, kl_loss_coef=cfg.kl_loss_coef if kl_term is not None else 0.0,
            entropy=entropy if cfg.entropy_loss_coef else None, entropy_loss_coef=cfg.entropy_loss_coef,
        )
        scale = float(mb["metric_scale"][0])
        metrics = {k: v for k, v in out.metrics.items() if k != "pg_loss"}
        metrics |= {verl: metrics[ours] for ours, verl in VERL_ACTOR_METRICS.items() if ours in metrics}
        metrics["pg_loss"] = out.metrics["pg_loss"] * scale
        metrics["entropy"] = float(entropy.detach()) * scale
        if kl_term is not None:
            metrics["kl_loss"] = float(kl_term.detach()) * scale
        return total, metrics

    return loss_fn


def make_critic_loss(cfg: PipelineConfig) -> Any:
    def loss_fn(model: nn.Module, mb: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        values = response_values(model, mb)
        out = pl.value_loss(values, mb["values"], mb["returns"], mb["response_mask"],
                            value_clip=cfg.value_clip, agg=_agg(cfg, mb))
        metrics = dict(out.metrics)
        metrics["vf_loss"] *= float(mb["metric_scale"][0])
        return out.loss, metrics

    return loss_fn


def attach_normalisers(micro: list[dict[str, Tensor]], global_tokens: Tensor, global_seqs: Tensor,
                       world_size: int) -> None:
    """Add the global normalisers and the metric scale to every micro-batch, one value per row."""
    scale = torch.tensor(float(len(micro) * world_size))
    for m in micro:
        rows = m["response_mask"].size(0)
        m["global_tokens"] = global_tokens.expand(rows)
        m["global_seqs"] = global_seqs.expand(rows)
        m["metric_scale"] = scale.expand(rows)
