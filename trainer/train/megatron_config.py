"""megatron_train / megatron_infer settings as plain data: the role's strategy_config (the schema's
MegatronConfig, ROLL's and RLinf's keys) and the Hugging Face model config, turned into the keyword
arguments of megatron-core's TransformerConfig, GPTModel, DistributedDataParallelConfig and
OptimizerConfig. Pure functions (torch only; megatron-core is imported by megatron_strategy), so the
mapping is tested on a machine without CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainer.models.megatron_convert import GPTLayout, check_tensor_parallel, padded_vocab_size
from trainer.train.base import OptimConfig

# megatron-core 0.16's llama3 RoPE scaling hard-codes these (rotary_pos_embedding._apply_scaling)
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
FULL_RECOMPUTE_DEFAULTS = ("uniform", 1)  # Megatron-LM's CLI defaults when only the granularity is set


def require_cuda(name: str) -> None:
    """Refuse to start on a machine without CUDA, saying why and what runs instead."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{name} needs a CUDA GPU and this machine has none: megatron-core's forward pass runs only on "
            "CUDA (its rotary embedding, default attention mask and RNG tracker call torch.cuda). On CPU use "
            "fsdp2_train or deepspeed_train (fsdp2_infer or deepspeed_infer for forward-only roles)."
        )


@dataclass(frozen=True)
class MegatronOptions:
    """The strategy_config keys this build acts on (docs/decisions/0016)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallelism: all-gather-KV attention (trainer.train.megatron_cp)
    vpp: int | None = None
    sequence_parallel: bool = False
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    distributed_optimizer: bool = False
    embedding_in_split: bool = False
    loss_in_split: bool = False
    init_checkpoint: str | None = (
        None  # a Megatron distributed checkpoint to start from instead of the HF weights
    )
    # mixture-of-experts models (Qwen3-MoE): megatron-core's MoELayer
    ep: int = 1
    etp: int | None = None  # expert tensor parallelism; unset: TP (megatron's default)
    moe_dispatcher: str = "allgather"
    moe_grouped_gemm: bool = False  # acts where Transformer Engine is installed (layer_spec_kwargs)
    moe_router_dtype: str | None = None

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp


def parse_strategy_config(config: Mapping[str, Any] | None) -> MegatronOptions:
    """Validate `strategy_config` against the schema's MegatronConfig and keep what acts here."""
    from trainer.config.schema import MegatronConfig

    cfg = MegatronConfig.model_validate(dict(config or {}))
    if cfg.use_dist_checkpointing and not cfg.dist_checkpointing_path:
        raise ValueError(
            "strategy_config.use_dist_checkpointing needs dist_checkpointing_path (the checkpoint folder)"
        )
    # method and layer count choose layers for full recomputation; selective recomputes core attention
    # in every layer (RLinf's configs set all three; Megatron refuses a layer count with selective)
    method, layers = None, None
    if cfg.recompute_granularity == "full":
        method = cfg.recompute_method or FULL_RECOMPUTE_DEFAULTS[0]
        layers = cfg.recompute_num_layers or FULL_RECOMPUTE_DEFAULTS[1]
    if cfg.overlap_param_gather and not cfg.use_distributed_optimizer:
        raise ValueError(
            "strategy_config.overlap_param_gather needs use_distributed_optimizer: true "
            "(only the distributed optimizer gathers parameters)"
        )
    return MegatronOptions(
        tp=cfg.tensor_model_parallel_size,
        pp=cfg.pipeline_model_parallel_size,
        cp=cfg.context_parallel_size,
        vpp=cfg.virtual_pipeline_model_parallel_size,
        sequence_parallel=cfg.sequence_parallel,
        recompute_granularity=cfg.recompute_granularity,
        recompute_method=method,
        recompute_num_layers=layers,
        overlap_grad_reduce=cfg.overlap_grad_reduce,
        overlap_param_gather=cfg.overlap_param_gather,
        distributed_optimizer=cfg.use_distributed_optimizer,
        embedding_in_split=cfg.account_for_embedding_in_pipeline_split,
        loss_in_split=cfg.account_for_loss_in_pipeline_split,
        init_checkpoint=cfg.dist_checkpointing_path if cfg.use_dist_checkpointing else None,
        ep=cfg.expert_model_parallel_size,
        etp=cfg.expert_tensor_parallel_size,
        moe_dispatcher=cfg.moe_token_dispatcher_type,
        moe_grouped_gemm=cfg.moe_grouped_gemm,
        moe_router_dtype=cfg.moe_router_dtype,
    )


def check_model_parallel(layout: GPTLayout, options: MegatronOptions, world_size: int, *, te: bool) -> None:
    """Raise, naming the sizes, when the parallel layout cannot hold this model on `world_size` ranks
    (`te`: Transformer Engine layers are available)."""
    if options.sequence_parallel and options.tp > 1 and not te:
        raise ValueError(
            "strategy_config.sequence_parallel needs Transformer Engine layers (megatron-core's own "
            "torch norm refuses it) and Transformer Engine is not installed here; turn it off"
        )
    model_parallel = options.tp * options.pp * options.cp
    if world_size % model_parallel:
        raise ValueError(
            "tensor_model_parallel_size × pipeline_model_parallel_size × context_parallel_size = "
            f"{options.tp} × {options.pp} × {options.cp} does not divide the role's {world_size} ranks"
        )
    check_tensor_parallel(layout, options.tp)
    check_expert_parallel(layout, options, world_size)
    chunks = options.pp * (options.vpp or 1)
    units = layout.num_layers + options.embedding_in_split + options.loss_in_split
    if units % chunks:
        counted = " + ".join(
            ["num_hidden_layers"]
            + ["embedding"] * options.embedding_in_split
            + ["loss"] * options.loss_in_split
        )
        raise ValueError(
            f"{counted} = {units} does not split evenly into pipeline_model_parallel_size × "
            f"virtual stages = {chunks} model chunks"
        )
    if (
        options.recompute_num_layers is not None
        and options.recompute_num_layers > layout.num_layers // chunks
    ):
        raise ValueError(
            f"strategy_config.recompute_num_layers={options.recompute_num_layers} exceeds the "
            f"{layout.num_layers // chunks} layers of one model chunk"
        )


def check_expert_parallel(layout: GPTLayout, options: MegatronOptions, world_size: int) -> None:
    """Raise, naming the sizes, when the expert layout cannot hold this model: E experts split in EP equal
    parts, the expert intermediate size in expert-TP parts, EP × expert TP × PP dividing the ranks; a
    dense model takes EP 1 only (there is nothing to split)."""
    if not layout.moe:
        if options.ep > 1:
            raise ValueError(
                f"strategy_config.expert_model_parallel_size={options.ep}: this {layout.arch} model has no "
                "experts; set it to 1"
            )
        return
    if layout.num_experts % options.ep:
        raise ValueError(
            f"expert_model_parallel_size={options.ep} does not divide num_experts={layout.num_experts}"
        )
    if layout.moe_ffn_hidden_size % options.expert_tp:
        raise ValueError(
            f"expert_tensor_parallel_size={options.expert_tp} does not divide "
            f"moe_intermediate_size={layout.moe_ffn_hidden_size}"
        )
    if world_size % (options.ep * options.expert_tp * options.pp):
        raise ValueError(
            "expert_model_parallel_size × expert_tensor_parallel_size × pipeline_model_parallel_size = "
            f"{options.ep} × {options.expert_tp} × {options.pp} does not divide the role's {world_size} ranks"
        )


def rope_kwargs(hf_config: Any) -> dict[str, Any]:
    """GPTModel's rotary settings from the HF config's rope parameters: default RoPE, or Llama 3's
    scaling when its constants are the ones megatron-core implements."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    rope_type = params.get("rope_type", "default")
    kwargs: dict[str, Any] = {"position_embedding_type": "rope", "rotary_base": float(params["rope_theta"])}
    if rope_type == "default":
        return kwargs
    if rope_type == "llama3" and all(float(params.get(k, -1)) == v for k, v in LLAMA3_ROPE.items()):
        return {**kwargs, "rope_scaling": True, "rope_scaling_factor": float(params["factor"])}
    raise ValueError(
        f"rope_type={rope_type!r} with {params} is not converted to Megatron; default RoPE and "
        f"llama3 scaling with {LLAMA3_ROPE} are"
    )


def layer_spec_kwargs(layout: GPTLayout, options: MegatronOptions, *, te: bool) -> dict[str, Any]:
    """The layer spec's model switches: Qwen3's q/k RMSNorm (qk_layernorm, one head_dim weight each) and
    an MoE model's experts. moe_grouped_gemm selects Transformer Engine's grouped GEMM (TEGroupedMLP)
    where TE is installed; without TE the experts are megatron's SequentialMLP (one torch MLP per
    expert, the same computation), since megatron's non-TE grouped GEMM needs the grouped_gemm package."""
    if not layout.moe:
        return {"qk_layernorm": layout.qk_norm}
    return {
        "qk_layernorm": layout.qk_norm,
        "num_experts": layout.num_experts,
        "moe_grouped_gemm": options.moe_grouped_gemm and te,
    }


def moe_config_kwargs(layout: GPTLayout, options: MegatronOptions, *, te: bool) -> dict[str, Any]:
    """TransformerConfig's MoE fields for Qwen3-MoE, routing as the HF model does: HF takes the top-k of
    softmax(logits) over all experts, renormalised when norm_topk_prob — the same as megatron's softmax
    over the top-k logits (moe_router_pre_softmax False: softmax(l)_i / Σ_top-k softmax(l)_j =
    exp(l_i) / Σ_top-k exp(l_j)); without norm_topk_prob the top-k of the full softmax
    (moe_router_pre_softmax True). The load-balancing loss is megatron's aux_loss with HF's
    router_aux_loss_coef (as ROLL's mcore_adapter): per layer coeff · E / (k · T²) · Σ_e tokens_e · Σ_t p_te;
    0 turns it off."""
    if not layout.moe:
        return {}
    return {
        "num_moe_experts": layout.num_experts,
        "moe_router_topk": layout.moe_topk,
        "moe_ffn_hidden_size": layout.moe_ffn_hidden_size,
        "moe_router_pre_softmax": not layout.norm_topk_prob,
        "moe_router_load_balancing_type": "aux_loss" if layout.aux_loss_coef > 0 else "none",
        "moe_aux_loss_coeff": layout.aux_loss_coef,
        "moe_router_dtype": options.moe_router_dtype,
        "moe_token_dispatcher_type": options.moe_dispatcher,
        "moe_grouped_gemm": options.moe_grouped_gemm and te,
        "expert_model_parallel_size": options.ep,
        "expert_tensor_parallel_size": options.expert_tp,
    }


def gpt_model_kwargs(layout: GPTLayout, hf_config: Any, tp: int) -> dict[str, Any]:
    """GPTModel's arguments besides the config, layer spec and pipeline position."""
    return {
        "vocab_size": padded_vocab_size(layout.vocab_size, tp),
        "max_sequence_length": hf_config.max_position_embeddings,
        "share_embeddings_and_output_weights": layout.tied_embeddings,
        "parallel_output": True,
        **rope_kwargs(hf_config),
    }


def transformer_config_kwargs(
    layout: GPTLayout, hf_config: Any, options: MegatronOptions, dtype: torch.dtype, *, te: bool = False
) -> dict[str, Any]:
    """TransformerConfig for this model and layout, computing as the HF model does: RMSNorm, SwiGLU,
    no linear biases but Qwen2's q/k/v bias, the HF attention dropout and no hidden dropout.

    Megatron's loss averaging is off (`calculate_per_token_loss`; the strategy also drops the token
    count): our losses arrive divided by the global normaliser, so the step's gradient is their plain
    sum over micro-batches and data-parallel ranks."""
    return {
        "num_layers": layout.num_layers,
        "hidden_size": layout.hidden_size,
        "ffn_hidden_size": layout.ffn_hidden_size,
        "num_attention_heads": layout.num_heads,
        "num_query_groups": layout.num_kv_heads,
        "kv_channels": layout.head_dim,
        "normalization": "RMSNorm",
        "layernorm_epsilon": hf_config.rms_norm_eps,
        "gated_linear_unit": True,
        "activation_func": F.silu,
        "add_bias_linear": False,
        "add_qkv_bias": layout.qkv_bias,
        "qk_layernorm": layout.qk_norm,
        "hidden_dropout": 0.0,
        "attention_dropout": float(getattr(hf_config, "attention_dropout", 0.0)),
        "tensor_model_parallel_size": options.tp,
        "pipeline_model_parallel_size": options.pp,
        "context_parallel_size": options.cp,
        "virtual_pipeline_model_parallel_size": options.vpp,
        "sequence_parallel": options.sequence_parallel and options.tp > 1,
        "recompute_granularity": options.recompute_granularity,
        "recompute_method": options.recompute_method,
        "recompute_num_layers": options.recompute_num_layers,
        "account_for_embedding_in_pipeline_split": options.embedding_in_split,
        "account_for_loss_in_pipeline_split": options.loss_in_split,
        "bf16": dtype == torch.bfloat16,
        "fp16": dtype == torch.float16,
        "params_dtype": dtype,
        "pipeline_dtype": dtype,
        "calculate_per_token_loss": True,
        **moe_config_kwargs(layout, options, te=te),
    }


def ddp_config_kwargs(options: MegatronOptions) -> dict[str, Any]:
    """DistributedDataParallelConfig: fp32 gradient accumulation and reduction (as torch_train's fp32
    gradients), overlap and the distributed optimizer as configured."""
    return {
        "grad_reduce_in_fp32": True,
        "overlap_grad_reduce": options.overlap_grad_reduce,
        "overlap_param_gather": options.overlap_param_gather,
        "use_distributed_optimizer": options.distributed_optimizer,
    }


def optimizer_config_kwargs(
    optim: OptimConfig, options: MegatronOptions, dtype: torch.dtype
) -> dict[str, Any]:
    """OptimizerConfig for training_args.optim: AdamW (Megatron's adam with decoupled decay), Adam
    (L2 decay) or SGD without momentum, as torch_train builds them. Clipping and the LR schedule stay
    ours (the strategy clips with the global norm and writes the LR before each step)."""
    kind = "sgd" if optim.optimizer == "sgd" else "adam"
    if kind == "sgd" and options.distributed_optimizer:
        raise ValueError(
            "training_args.optim=sgd cannot run with strategy_config.use_distributed_optimizer: "
            "megatron-core's distributed optimizer shards Adam state only; use adamw or turn it off"
        )
    return {
        "optimizer": kind,
        "lr": optim.lr,
        "weight_decay": optim.weight_decay,
        "adam_beta1": optim.betas[0],
        "adam_beta2": optim.betas[1],
        "adam_eps": optim.eps,
        "decoupled_weight_decay": optim.optimizer != "adam",
        "sgd_momentum": 0.0,
        "clip_grad": 0.0,
        "bf16": dtype == torch.bfloat16,
        "fp16": dtype == torch.float16,
        "params_dtype": dtype,
        "use_distributed_optimizer": options.distributed_optimizer,
        "overlap_param_gather": options.overlap_param_gather,
    }
