"""actor_train: the policy being trained. Old log-probs, the PPO/GRPO update with the policy loss
the config names, and its full weights for the rollout engine and for Hugging Face checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from trainer.algorithms import kl as kl_algos
from trainer.algorithms import policy_loss as pl
from trainer.algorithms import registry
from trainer.algorithms.aggregation import LossAgg
from trainer.config.topology import train_shape
from trainer.models import adapters, lora
from trainer.models.batch import per_response_token, response_logits_and_logprobs
from trainer.roles.common import (
    RoleBase,
    build_train_strategy,
    forward_in_chunks,
    load_role_model,
    logprobs_fn,
    lora_served,
    micro_batching,
    model_path,
    role_section,
    sampling_temperature,
    seed_training_role,
)
from trainer.roles.profiling import profiled
from trainer.train.base import TrainStrategy, weight_buckets
from trainer.train.ppo_update import NormalisedLossFn, Normalisers, ppo_update

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

# verl's names for the same quantities, logged next to ours (`actor/<name>`)
VERL_ACTOR_METRICS = {"clipfrac": "pg_clipfrac", "clipfrac_lower": "pg_clipfrac_lower"}


class TrainedRole(RoleBase):
    """actor_train and critic: a model behind a training strategy, updated with ppo_update; the
    strategy writes the checkpoint, this rank's RNG state included."""

    cfg: PipelineConfig
    role_prefix: str
    strategy: TrainStrategy

    def update(self, batch: dict[str, Tensor], step: int, loss_fn: NormalisedLossFn) -> dict[str, float]:
        shape = train_shape(self.cfg, self.role, self.world_size)
        metrics = ppo_update(self.strategy, batch, shape, loss_fn, seed=self.cfg.seed, step=step,
                             micro_batching=micro_batching(self.cfg, self.role, "train"))
        return {f"{self.role_prefix}/{key}": value for key, value in metrics.items()}

    def save_checkpoint(self, path: str) -> None:
        self.strategy.save_checkpoint(Path(path) / self.role / "strategy")

    def load_checkpoint(self, path: str) -> dict[str, int | None]:
        """Restore the strategy; returns the optimizer and scheduler steps it restored (the resume report)."""
        self.strategy.load_checkpoint(Path(path) / self.role / "strategy")
        return self.strategy.progress()


class ActorTrainWorker(TrainedRole):
    role_prefix = "actor"

    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        seed_training_role(cfg, role, rank)
        model = load_role_model(cfg, role, training=True)
        self.temperature = sampling_temperature(cfg)
        self.loss_spec = LossSpec.from_config(cfg)
        self.strategy = build_train_strategy(cfg, role, model, rank, world_size)
        args = role_section(cfg, role).model_args
        # the engine and the HF export get W + scaling · B @ A under the plain names
        self.lora_scaling = lora.lora_scaling(args) if lora.lora_enabled(args) else None
        # ...or, where the vllm engine serves LoRA itself (strategy_config.enable_lora), the adapter alone
        self.engine_takes_adapter = lora_served(cfg)

    @profiled
    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        chunk = role_section(self.cfg, self.role).infer_batch_size
        return forward_in_chunks(logprobs_fn(self.temperature), self.strategy, batch, chunk,
                                 micro_batching(self.cfg, self.role, "infer"))

    @profiled
    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]:
        return self.update(batch, step, partial(actor_loss, self.loss_spec, self.temperature))

    def full_state_dict(self) -> dict[str, Tensor]:
        """The policy's full weights under the plain model's names (LoRA merged in); rank 0's, `{}` on the
        other ranks of a sharded strategy."""
        state = self.strategy.full_state_dict()
        return state if self.lora_scaling is None else lora.merged_state_dict(state, self.lora_scaling)

    def engine_weights(self) -> dict[str, Tensor]:
        """What the rollout engine loads after an update: the full merged weights (full_state_dict), or only the
        adapter under PEFT's names where vLLM serves the LoRA (a fraction of the bytes; the frozen base is
        already there). Rank 0's, `{}` on the other ranks of a sharded strategy."""
        if not self.engine_takes_adapter:
            return self.full_state_dict()
        return adapters.adapter_tensors(self.strategy.full_state_dict())

    def weight_buckets(self, device: str, dtype: torch.dtype, bucket_bytes: int) -> Iterator[dict[str, Tensor]]:
        """The full weights for an engine in this process, bucketed on its device and in its dtype
        (no round trip through the CPU when both share a GPU); LoRA merged in float32 first."""
        if self.lora_scaling is None:
            return self.strategy.full_weights(device=device, dtype=dtype, bucket_bytes=bucket_bytes)
        buckets = self.strategy.full_weights(device=device, dtype=torch.float32, bucket_bytes=bucket_bytes)
        merged = lora.merge_lora((item for bucket in buckets for item in bucket.items()), self.lora_scaling)
        return weight_buckets(merged, device=torch.device(device), dtype=dtype, bucket_bytes=bucket_bytes)

    def save_hf(self, path: str, tokenizer_path: str) -> None:
        """Write the policy in Hugging Face format (rank 0 writes; every rank must call it, since
        gathering the full weights is a collective under fsdp2_train). With LoRA: the merged model, which
        any HF or vLLM loader reads as it is, and beside it (`lora_adapter/`) the adapter as a PEFT folder,
        which model_args.adapter_name_or_path (over the same base model), PEFT and vLLM load."""
        state = self.strategy.full_state_dict()
        if self.rank != 0:
            return
        from trainer.models.loading import load_tokenizer

        if self.lora_scaling is not None:
            args = role_section(self.cfg, self.role).model_args
            adapters.save_adapter(Path(path).parent / adapters.ADAPTER_DIR, state, args, model_path(self.cfg, self.role))
            state = lora.merged_state_dict(state, self.lora_scaling)
        self.strategy.export_model().save_pretrained(path, state_dict=state)
        load_tokenizer(tokenizer_path).save_pretrained(path)


@dataclass(frozen=True)
class LossSpec:
    """The loss knobs of the trained roles, and nothing else of the config: what `actor_loss` and
    `critic_loss` read (the narrow view of the `PipelineConfig`, like `TrainShape` for the batch
    arithmetic). `policy_loss` is the resolved name in `trainer.algorithms.registry.POLICY_LOSSES`:
    `topr` with `use_topr_loss`, `topr_token` with ROLL's `actor_train.pg_variant: topr`, `pg` with ROLL's
    `use_policy_loss_type: PG`, else `policy_loss` (ppo, gspo)."""

    policy_loss: str = "ppo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float | None = None  # clip_ratio_c where dual_clip_loss is set
    topr_positive_weight: float = 1.0
    topr_negative_weight: float = 1.0
    loss_agg_mode: str = "token-mean"
    norm_length: int | None = None  # response_length (seq-mean-token-sum-norm)
    rl_loss_coef: float = 1.0
    entropy_loss_coef: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_penalty: str = "kl"
    use_topr_neg_loss_coef: float = 0.0
    value_clip: float | None = None

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> LossSpec:
        clip_low, clip_high = cfg.clip_range()
        name = ("topr" if cfg.use_topr_loss else "topr_token" if cfg.actor_train.pg_variant == "topr"
                else "pg" if cfg.use_policy_loss_type == "PG" else cfg.policy_loss)
        registry.get_policy_loss(name)  # an unknown name fails here, naming the valid ones
        return cls(
            policy_loss=name, clip_low=clip_low, clip_high=clip_high,
            dual_clip_c=cfg.clip_ratio_c if cfg.dual_clip_loss else None,
            topr_positive_weight=cfg.actor_train.topr_positive_weight,
            topr_negative_weight=cfg.actor_train.topr_negative_weight,
            loss_agg_mode=cfg.loss_agg_mode, norm_length=cfg.response_length, rl_loss_coef=cfg.rl_loss_coef,
            entropy_loss_coef=cfg.entropy_loss_coef, use_kl_loss=cfg.use_kl_loss, kl_loss_coef=cfg.kl_loss_coef,
            kl_penalty=cfg.kl_penalty, use_topr_neg_loss_coef=cfg.use_topr_neg_loss_coef, value_clip=cfg.value_clip,
        )

    def loss_agg(self, norm: Normalisers) -> LossAgg:
        """The aggregation over the GLOBAL counts ppo_update passes with the micro-batch."""
        return LossAgg(self.loss_agg_mode, global_num_tokens=norm.tokens, global_num_seqs=norm.seqs,
                       norm_length=self.norm_length)

    def policy_loss_options(self, mb: dict[str, Tensor]) -> dict[str, Any]:
        """The keyword arguments of the named policy loss beyond (log π, log π_old, A, mask, agg, weights):
        POLICY_LOSS_OPTIONS names them, the spec and the micro-batch (`scores`) give their values."""
        values = {"clip_low": self.clip_low, "clip_high": self.clip_high, "dual_clip_c": self.dual_clip_c,
                  "positive_weight": self.topr_positive_weight, "negative_weight": self.topr_negative_weight}
        return {name: mb["scores"] if name == "scores" else values[name]
                for name in POLICY_LOSS_OPTIONS[self.policy_loss]}


# the options each policy loss of trainer.algorithms.registry takes (keyword arguments of its function)
POLICY_LOSS_OPTIONS: dict[str, tuple[str, ...]] = {
    "ppo": ("clip_low", "clip_high", "dual_clip_c"),
    "pg": (),
    "gspo": ("clip_low", "clip_high"),
    "topr": ("scores",),
    "topr_token": ("scores", "positive_weight", "negative_weight"),
}


def actor_loss(spec: LossSpec, temperature: float, model: nn.Module, mb: dict[str, Tensor], *,
               norm: Normalisers) -> tuple[Tensor, dict[str, float]]:
    """The policy loss `spec` names (LossSpec.policy_loss, looked up in trainer.algorithms.registry), the
    clipped ones with the clip range `pg_clip_low`/`pg_clip_high` (else `pg_clip`), plus the entropy and KL
    terms and TOPR's negative-sample term:

        loss = rl_loss_coef · L_pg + kl_loss_coef · KL(π, π_ref) − entropy_loss_coef · H(π)
               + use_topr_neg_loss_coef · L_topr−

    Every term is divided by the global normalisers `norm` (ppo_update's, per mini-batch).
    A micro-batch may carry `sample_weights` [batch] (difficulty / length loss weights): they weight
    the policy-gradient term only, as ROLL does, not the entropy or KL terms. It may carry
    `train_infer_weights` [batch, len] (train_infer_correction's is_weight, trainer.algorithms.train_infer):
    w_t multiplies token t's policy-gradient term only, as ROLL multiplies its pg loss; every L_pg here is
    positively homogeneous in the advantage (clips and dual clip included), so that is L_pg with w_t·A_t."""
    mask = mb["response_mask"]
    logits, log_probs = response_logits_and_logprobs(model, mb, temperature)
    agg = spec.loss_agg(norm)
    # absent when this is the only update on fresh rollouts: then π_old = π (ratio 1, exact)
    old = mb["old_log_probs"] if "old_log_probs" in mb else log_probs.detach()
    weights = mb.get("sample_weights")
    # the policy-gradient term's advantages, weighted by train_infer_correction's is_weight where it acts
    adv = mb["advantages"] * mb["train_infer_weights"] if "train_infer_weights" in mb else mb["advantages"]
    out = registry.get_policy_loss(spec.policy_loss)(log_probs, old, adv, mask, agg=agg, sample_weights=weights,
                                                     **spec.policy_loss_options(mb))
    entropy = pl.entropy_loss(per_response_token(pl.entropy_from_logits(logits), mb), mask, agg)
    kl_term = None
    if spec.use_kl_loss:
        kl_term = kl_algos.kl_loss(log_probs, mb["ref_log_probs"], mask, spec.kl_penalty, agg)
    topr_negative = (pl.topr_negative_loss(log_probs, old, mb["advantages"], mask, mb["scores"], agg)
                     if spec.use_topr_neg_loss_coef else None)
    total = pl.actor_loss(
        out.loss, rl_loss_coef=spec.rl_loss_coef,
        kl=kl_term, kl_loss_coef=spec.kl_loss_coef if kl_term is not None else 0.0,
        entropy=entropy if spec.entropy_loss_coef else None, entropy_loss_coef=spec.entropy_loss_coef,
        topr_negative=topr_negative, use_topr_neg_loss_coef=spec.use_topr_neg_loss_coef,
    )
    scale = norm.metric_scale
    metrics = {k: v for k, v in out.metrics.items() if k != "pg_loss"}
    metrics |= {verl: metrics[ours] for ours, verl in VERL_ACTOR_METRICS.items() if ours in metrics}
    metrics["pg_loss"] = out.metrics["pg_loss"] * scale
    metrics["entropy"] = float(entropy.detach()) * scale
    if kl_term is not None:
        metrics["kl_loss"] = float(kl_term.detach()) * scale
    if topr_negative is not None:
        metrics["topr_neg_loss"] = float(topr_negative.detach()) * scale
    return total, metrics
