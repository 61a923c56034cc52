"""Strategy configs, typed per strategy_name (strategy_args.strategy_config of a role)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from trainer.config.sections.base import (
    AutoBool,
    AutoFloat,
    AutoInt,
    Dtype,
    Section,
    fld,
    fld_factory,
    import_only,
    planned,
)


class MegatronConfig(Section):
    tensor_model_parallel_size: int = fld(1, category="Strategy", ge=1, description="Tensor-parallel degree (TP).")
    pipeline_model_parallel_size: int = fld(1, category="Strategy", ge=1, description="Pipeline-parallel degree (PP).")
    virtual_pipeline_model_parallel_size: int | None = fld(
        None, category="Strategy", ge=1, description="Model chunks per pipeline stage (interleaved schedule)."
    )
    context_parallel_size: int = fld(
        1, category="Strategy", ge=1,
        description="Context-parallel degree (CP): each rank holds 2 of 2·CP sequence chunks and its attention "
        "gathers the keys and values of the CP group (all-gather KV, docs/decisions/0058).",
    )
    expert_model_parallel_size: int = fld(
        1, category="Strategy", ge=1,
        description="Expert-parallel degree (EP) for mixture-of-experts layers (Qwen3-MoE): EP rank e holds experts "
                    "e·E/EP … (e+1)·E/EP − 1. A dense model takes 1.",
    )
    expert_tensor_parallel_size: int | None = fld(
        None, category="Strategy", ge=1,
        description="Tensor-parallel degree inside experts; unset uses TP (megatron-core's default).",
    )
    sequence_parallel: bool = fld(
        False, category="Strategy", description="Shard layer-norm and dropout activations along the sequence (needs TP > 1)."
    )
    recompute_granularity: Literal["full", "selective"] | None = fld(
        None, category="Strategy",
        description="Activation recomputation: full recomputes whole layers, selective only core attention.",
    )
    recompute_method: Literal["uniform", "block"] | None = fld(
        None, category="Strategy", description="How layers are chosen for full recomputation."
    )
    recompute_num_layers: int | None = fld(
        None, category="Strategy", ge=1, description="Layers recomputed per chunk (uniform) or per stage (block)."
    )
    moe_layer_recompute: bool = fld(
        False, category="Strategy",
        inactive=planned("Recomputing the mixture-of-experts layers alone (recompute_granularity full recomputes "
                         "whole layers, experts included)"),
        description="Recompute mixture-of-experts layers.",
    )
    moe_token_dispatcher_type: Literal["allgather", "alltoall"] = fld(
        "allgather", category="Strategy",
        description="How tokens reach their experts across expert-parallel ranks: allgather or alltoall "
                    "(megatron-core's dispatchers; the same result, other communication).",
    )
    moe_grouped_gemm: bool = fld(
        False, category="Strategy",
        description="Run a rank's experts as one grouped GEMM: Transformer Engine's TEGroupedMLP where TE is "
                    "installed; without TE the experts run one by one (megatron's SequentialMLP, the same result).",
    )
    moe_shared_expert_overlap: bool = fld(
        False, category="Strategy",
        inactive=import_only("Qwen3-MoE, the mixture-of-experts model megatron_train builds, has no shared expert"),
        description="Overlap shared-expert compute with token dispatch.",
    )
    overlap_grad_reduce: bool = fld(
        False, category="Strategy", description="Overlap gradient reduction with the backward pass."
    )
    overlap_param_gather: bool = fld(
        False, category="Strategy", description="Overlap parameter all-gather with the forward pass."
    )
    use_distributed_optimizer: bool = fld(
        False, category="Strategy", description="Shard optimizer state across data-parallel ranks (ZeRO-1 style)."
    )
    account_for_embedding_in_pipeline_split: bool = fld(
        False, category="Strategy", description="Count the embedding as a layer when splitting pipeline stages."
    )
    account_for_loss_in_pipeline_split: bool = fld(
        False, category="Strategy", description="Count the loss head as a layer when splitting pipeline stages."
    )
    param_offload: bool = fld(
        False, category="Strategy", inactive=planned("Megatron offload between phases"),
        description="Move parameters to CPU memory while the role is idle (colocation).",
    )
    grad_offload: bool = fld(False, category="Strategy", inactive=planned("Megatron offload between phases"),
                             description="Move gradients to CPU memory while idle.")
    optimizer_offload: bool = fld(
        False, category="Strategy", inactive=planned("Megatron offload between phases"),
        description="Move optimizer state to CPU memory while the role is idle.",
    )
    use_dist_checkpointing: bool = fld(
        False, category="Strategy",
        description="Load the initial weights from a Megatron distributed checkpoint instead of the HF model.",
    )
    dist_checkpointing_path: str | None = fld(
        None, category="Strategy", path="read", description="Folder of that distributed checkpoint."
    )
    use_flash_attn: bool | None = fld(
        None, category="Strategy", inactive=import_only("megatron-core picks its attention kernel"),
        description="ROLL: ask megatron-core for flash attention.",
    )
    moe_router_dtype: Literal["fp32", "fp64"] | None = fld(
        None, category="Strategy",
        description="ROLL: dtype of the MoE router's logits and routing (unset: the model's dtype, as HF).",
    )
    fp8: str | None = fld(
        None, category="Strategy", inactive=import_only("FP8 training is not built; the role trains in model_args.dtype"),
        description="ROLL: megatron-core's FP8 format (e4m3, hybrid).",
    )
    fp8_recipe: str | None = fld(
        None, category="Strategy", inactive=import_only("FP8 training is not built; the role trains in model_args.dtype"),
        description="ROLL: megatron-core's FP8 scaling recipe (delayed, tensorwise, mxfp8, …).",
    )


class OffloadConfig(Section):
    device: Literal["none", "cpu", "nvme"] = fld("none", category="Strategy", description="Where state is offloaded.")
    pin_memory: bool = fld(False, category="Strategy", description="Use page-locked host memory for faster copies.")
    nvme_path: str | None = fld(None, category="Strategy", path="write", description="Folder on NVMe used when device is nvme.")
    buffer_count: int | None = fld(None, category="Strategy", ge=1, description="Offload buffers (nvme).")


class ZeroOptimization(Section):
    stage: Literal[0, 1, 2, 3] = fld(0, category="Strategy", description="ZeRO stage: what is sharded (0 none … 3 params).")
    offload_optimizer: OffloadConfig | None = fld(None, category="Strategy", description="Offload of optimizer state.")
    offload_param: OffloadConfig | None = fld(None, category="Strategy", description="Offload of parameters (stage 3).")
    overlap_comm: bool | None = fld(None, category="Strategy", description="Overlap gradient reduction with backward.")
    contiguous_gradients: bool | None = fld(None, category="Strategy", description="Copy gradients to one buffer.")
    allgather_partitions: bool | None = fld(None, category="Strategy", description="All-gather updated partitions.")
    allgather_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="All-gather bucket (elements).")
    reduce_scatter: bool | None = fld(None, category="Strategy", description="Reduce gradients with reduce-scatter.")
    reduce_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="Reduction bucket (elements).")
    round_robin_gradients: bool | None = fld(None, category="Strategy", description="Round-robin gradient partitioning.")
    sub_group_size: AutoFloat | None = fld(None, category="Strategy", description="Parameters per optimizer sub-group.")
    stage3_prefetch_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="Stage-3 prefetch size.")
    stage3_param_persistence_threshold: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: parameters smaller than this stay unpartitioned."
    )
    stage3_max_live_parameters: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: most parameters resident on a GPU at once."
    )
    stage3_max_reuse_distance: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: keep a parameter if it is reused within this distance."
    )
    stage3_gather_16bit_weights_on_model_save: bool | None = fld(
        True, category="Strategy",
        inactive=import_only("deepspeed_train always gathers the full weights for the HF checkpoint and weight sync"),
        description="Stage-3: gather full 16-bit weights when saving.",
    )
    zero_hpz_partition_size: int | None = fld(
        None, category="Strategy", ge=1, description="Hierarchical partition size (ZeRO++ hpZ)."
    )

    @model_validator(mode="after")
    def _offload_needs_partitions(self) -> ZeroOptimization:
        """DeepSpeed offloads only what ZeRO partitions: optimizer state from stage 1, parameters at stage 3."""
        if self.offload_optimizer is not None and self.offload_optimizer.device != "none" and self.stage < 1:
            raise ValueError("offload_optimizer needs stage 1, 2 or 3 (stage 0 keeps whole optimizer "
                             "state on every rank); set stage or offload_optimizer.device: none")
        if self.offload_param is not None and self.offload_param.device != "none" and self.stage != 3:
            raise ValueError(f"offload_param needs stage 3 (only stage 3 partitions parameters), got stage "
                             f"{self.stage}; set stage: 3 or offload_param.device: none")
        return self


class PrecisionToggle(Section):
    enabled: AutoBool = fld("auto", category="Strategy", description="Turn this precision on, off, or follow model dtype.")
    loss_scale: float | None = fld(None, category="Strategy", description="fp16: static loss scale (0 = dynamic).")
    loss_scale_window: int | None = fld(None, category="Strategy", description="fp16: steps between scale raises.")
    initial_scale_power: int | None = fld(None, category="Strategy", description="fp16: initial scale is 2^power.")
    hysteresis: int | None = fld(None, category="Strategy", description="fp16: overflows tolerated before lowering scale.")
    min_loss_scale: float | None = fld(None, category="Strategy", description="fp16: lowest dynamic loss scale.")


class DeepSpeedConfig(Section):
    """DeepSpeed's JSON config, the part RL training uses (deepspeed_train / deepspeed_infer). `auto` lets
    the trainer fill a value; the batch keys and gradient_clipping are derived (trainer.config.presets)."""

    train_batch_size: AutoInt | None = fld(None, category="Strategy", description="Global batch; keep auto.")
    train_micro_batch_size_per_gpu: AutoInt | None = fld(
        None, category="Strategy", description="Micro-batch per GPU; keep auto (from training_args)."
    )
    gradient_accumulation_steps: AutoInt | None = fld(
        None, category="Strategy", description="Accumulation steps; keep auto (from training_args)."
    )
    gradient_clipping: AutoFloat | None = fld(
        None, category="Strategy", description="Gradient norm clip; keep auto (from training_args.max_grad_norm)."
    )
    zero_optimization: ZeroOptimization = fld_factory(
        ZeroOptimization, category="Strategy", description="ZeRO sharding and offload settings."
    )
    bf16: PrecisionToggle | None = fld(None, category="Strategy", description="bfloat16 mixed precision.")
    fp16: PrecisionToggle | None = fld(None, category="Strategy", description="float16 mixed precision.")
    zero_allow_untested_optimizer: bool | None = fld(
        True, category="Strategy",
        description="Allow optimizers DeepSpeed has not tested with ZeRO (training_args.optim: sgd needs it).",
    )
    steps_per_print: int | None = fld(None, category="Strategy", description="DeepSpeed's own logging interval.")
    wall_clock_breakdown: bool | None = fld(None, category="Strategy", description="Print timing breakdowns.")

    @model_validator(mode="after")
    def _bf16_has_no_loss_scale(self) -> DeepSpeedConfig:
        given = self.bf16.model_dump(exclude_none=True, exclude={"enabled"}) if self.bf16 is not None else {}
        scaling = sorted(given)
        if scaling:
            raise ValueError(f"bf16.{scaling[0]}: bf16 needs no loss scaling; loss-scale settings belong under fp16")
        return self


def torch_dtype_alias(cls: type, value: Any) -> Any:
    """ROLL writes torch's names (float32, bfloat16, float16)."""
    names = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
    return names.get(value, value) if isinstance(value, str) else value


class Fsdp2Config(Section):
    reshard_after_forward: bool | int = fld(
        True, category="Strategy",
        description="Free gathered parameters after forward (true), keep them (false, like ZeRO-2), or reshard "
        "to this smaller group size.",
    )
    cpu_offload: bool = fld(False, category="Strategy", description="Keep parameters and optimizer state in CPU memory.")
    param_dtype: Dtype | None = fld(None, category="Strategy", description="Mixed precision: dtype of gathered parameters.")
    reduce_dtype: Dtype | None = fld(None, category="Strategy", description="Mixed precision: dtype of gradient reduction.")
    fsdp_size: int = fld(
        -1, category="Strategy",
        description="Ranks that shard one model copy (hybrid sharding); -1 shards across the whole role.",
    )
    offload_pin_memory: bool = fld(False, category="Strategy", description="Pin CPU memory used for offload.")
    ulysses_sequence_parallel_size: int = fld(
        1, category="Strategy", inactive=planned("Ulysses sequence parallelism"), ge=1,
        description="Ranks that split each sequence (Ulysses attention); data-parallel size is world / this.",
    )
    offload_policy: bool = fld(
        False, category="Strategy", acts_through="cpu_offload",
        description="ROLL's name for FSDP2's CPU offload policy; true turns cpu_offload on.",
    )
    wrap_policy: dict[str, Any] | None = fld(
        None, category="Strategy", inactive=import_only("FSDP2 shards each decoder layer; the wrap policy is fixed"),
        description="Which modules are sharded as units (ROLL: transformer_layer_cls_to_wrap).",
    )
    use_batched_model_update: bool = fld(
        False, category="Strategy",
        inactive=import_only("weights reach the rollout engine in buckets after every update, whatever this says"),
        description="ROLL: send updated weights to the rollout engine in batches.",
    )

    _torch_dtype_names = field_validator("param_dtype", "reduce_dtype", mode="before")(torch_dtype_alias)

    @model_validator(mode="after")
    def _offload_policy_offloads(self) -> Fsdp2Config:
        if self.offload_policy and "cpu_offload" not in self.model_fields_set:
            self.cpu_offload = True
        return self


class TorchTrainConfig(Section):
    """The single-process strategy: one device, plain PyTorch (as a forward-only role too)."""

    param_dtype: Dtype | None = fld(
        None, category="Strategy",
        description="Mixed precision: forward and backward under autocast in this dtype, master weights and "
        "optimizer state in fp32 (fp16 adds a gradient scaler). Unset: the role's model_args.dtype.",
    )

    _torch_dtype_names = field_validator("param_dtype", mode="before")(torch_dtype_alias)


class HfInferConfig(Section):
    """transformers `generate` needs no engine knobs."""


class VllmConfig(Section):
    gpu_memory_utilization: float = fld(
        0.6, category="Strategy", gt=0, le=1, description="Fraction of GPU memory vLLM may take (weights + KV cache)."
    )
    block_size: int | None = fld(
        None, category="Strategy", ge=1,
        description="Tokens per KV-cache block; unset lets the attention backend choose (CPU needs a multiple of 32).",
    )
    max_model_len: int | None = fld(
        None, category="Strategy", ge=1,
        description="Longest prompt + response the engine accepts; unset derives it from the model config.",
    )
    load_format: Literal["auto", "dummy", "safetensors", "pt"] = fld(
        "auto", category="Strategy",
        description="How the engine loads weights; dummy skips loading since the trainer pushes weights at start.",
    )
    tensor_parallel_size: int = fld(1, category="Strategy", ge=1, description="GPUs one engine shards a model over.")
    pipeline_parallel_size: int = fld(1, category="Strategy", inactive=planned("pipeline-parallel vLLM engines"), ge=1, description="Pipeline stages of one engine.")
    enforce_eager: bool = fld(
        False, category="Strategy",
        description="Disable CUDA graphs and torch.compile (faster start, slower decode; on CPU start takes seconds).",
    )
    enable_prefix_caching: bool = fld(False, category="Strategy", description="Reuse KV cache of shared prompt prefixes.")
    enable_chunked_prefill: bool | None = fld(None, category="Strategy", description="Split long prefills into chunks.")
    sleep_level: Literal[1, 2] = fld(
        1, category="Strategy",
        description="What sleep frees when colocated: 1 offloads weights and drops KV cache, 2 drops both.",
    )
    max_num_batched_tokens: int | None = fld(None, category="Strategy", ge=1, description="Token budget per engine step.")
    max_num_seqs: int | None = fld(None, category="Strategy", ge=1, description="Most sequences decoded concurrently.")
    disable_log_stats: bool = fld(True, category="Strategy", description="Silence periodic engine statistics.")
    online_quantization: str | None = fld(
        None, category="Strategy",
        inactive=import_only("quantized rollouts are not built; the engine generates in model_args.dtype"),
        description="ROLL: quantize the engine's weights when they are loaded (e.g. Ascend's ascend_mxfp8).",
    )
    online_quantization_config: dict[str, Any] | None = fld(
        None, category="Strategy",
        inactive=import_only("quantized rollouts are not built; the engine generates in model_args.dtype"),
        description="ROLL: settings of online_quantization (e.g. group_size).",
    )
    kv_cache_memory_bytes: int | None = fld(
        None, category="Strategy", ge=1,
        description="KV-cache size in bytes, instead of what gpu_memory_utilization leaves. Unset on CPU: 1 GiB "
        "(vLLM would otherwise reserve most of the node's memory; VLLM_CPU_KVCACHE_SPACE in GiB overrides).",
    )
    enable_lora: bool = fld(
        False, category="Strategy",
        description="Serve actor_train's LoRA adapter with vLLM's LoRA support (LoRARequest) on the base weights "
        "the engine loaded: each sync sends the adapter only, not the merged full weights. Needs actor_train's "
        "lora_target, no additional_target, and a load_format that loads the base weights.",
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] | None = fld(
        None, category="Strategy",
        description="vLLM's largest servable LoRA rank (with enable_lora); unset: the smallest of vLLM's sizes "
        ">= actor_train's lora_rank.",
    )


class SglangConfig(Section, inactive=planned("the sglang engine")):
    mem_fraction_static: float = fld(
        0.8, category="Strategy", gt=0, le=1, description="Fraction of GPU memory for weights and KV cache."
    )
    load_format: Literal["auto", "dummy", "safetensors", "pt"] = fld(
        "auto", category="Strategy", description="How weights are loaded; dummy waits for the trainer's weights."
    )
    tp_size: int = fld(1, category="Strategy", ge=1, description="GPUs one engine shards a model over.")
    context_length: int | None = fld(
        None, category="Strategy", ge=1, description="Longest prompt + response; unset derives it from the model."
    )
    attention_backend: str | None = fld(None, category="Strategy", description="Attention kernel (e.g. flashinfer, triton).")
    disable_cuda_graph: bool = fld(False, category="Strategy", description="Disable CUDA graphs.")
    enable_memory_saver: bool = fld(True, category="Strategy", description="Allow releasing memory while colocated.")
    max_running_requests: int | None = fld(None, category="Strategy", ge=1, description="Most concurrent requests.")


def _none_as_empty(cls: type, value: Any) -> Any:
    return {} if value is None else value  # ROLL writes `strategy_config: ~` for "no settings"


def _strategy(name: str, config_cls: type[Section], description: str) -> type[Section]:
    """One member of the strategy_args union: strategy_name selects the strategy_config model."""
    return type(
        f"StrategyArgs_{name}",
        (Section,),
        {
            "__annotations__": {"strategy_name": Literal[name], "strategy_config": config_cls},
            "__doc__": description,
            "strategy_name": fld(
                ..., category="Strategy", description="Which training or inference backend runs this role."
            ),
            "strategy_config": fld_factory(
                config_cls, category="Strategy", description=f"Settings of the {name} strategy."
            ),
            "_empty_config": field_validator("strategy_config", mode="before")(_none_as_empty),
            "__module__": __name__,
        },
    )


STRATEGY_CONFIG_MODELS: dict[str, type[Section]] = {
    "megatron_train": MegatronConfig,
    "megatron_infer": MegatronConfig,
    "deepspeed_train": DeepSpeedConfig,
    "deepspeed_infer": DeepSpeedConfig,
    "fsdp2_train": Fsdp2Config,
    "fsdp2_infer": Fsdp2Config,
    "torch_train": TorchTrainConfig,
    "hf_infer": HfInferConfig,
    "vllm": VllmConfig,
    "sglang": SglangConfig,
}
STRATEGY_ARGS_MODELS: dict[str, type[Section]] = {
    name: _strategy(name, cfg, f"strategy_args for {name}") for name, cfg in STRATEGY_CONFIG_MODELS.items()
}
# The tag strategy_name picks the typed strategy_config model.
StrategyArgs = Annotated[
    Union[tuple(STRATEGY_ARGS_MODELS.values())],  # noqa: UP007
    Field(discriminator="strategy_name"),
]
