"""Megatron's parallel state and this rank's GPTModel chunks, built and loaded from Hugging Face weights —
the construction half of `megatron_train` / `megatron_infer` (trainer.train.megatron_strategy runs them)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from trainer.models.megatron_convert import GPTLayout, hf_to_megatron, to_te_names
from trainer.train.megatron_config import MegatronOptions, gpt_model_kwargs, layer_spec_kwargs
from trainer.train.megatron_cp import ContextParallel, attend, gather_sequence
from trainer.train.megatron_lora import is_adapter_key

with (
    warnings.catch_warnings()
):  # "Transformer Engine and Apex are not installed": we say so in the spec choice
    warnings.simplefilter("ignore", UserWarning)
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        HAVE_TE,
        get_gpt_layer_local_spec,
        get_gpt_layer_with_transformer_engine_spec,
    )
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.moe import moe_utils
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_config import TransformerConfig

if not hasattr(moe_utils, "te_general_gemm"):
    # megatron-core 0.16.1 without Transformer Engine: moe_utils' ImportError branch leaves te_general_gemm
    # undefined and the router's gating GEMM then raises NameError; None is what its code reads as "no TE"
    moe_utils.te_general_gemm = None


# parallel state, model construction, weights


def initialize_parallel_state(options: MegatronOptions) -> None:
    """Megatron's TP / PP (/ virtual PP) / CP groups over the default process group; a second role in
    the same process (the local backend) joins them when its sizes agree."""
    wanted = (options.tp, options.pp, options.vpp, options.cp, options.ep, options.expert_tp)
    if ps.model_parallel_is_initialized():
        current = (
            ps.get_tensor_model_parallel_world_size(),
            ps.get_pipeline_model_parallel_world_size(),
            ps.get_virtual_pipeline_model_parallel_world_size(),
            ps.get_context_parallel_world_size(),
            ps.get_expert_model_parallel_world_size(),
            ps.get_expert_tensor_parallel_world_size(),
        )
        if current != wanted:
            raise ValueError(
                "megatron's parallel state in this process already has (TP, PP, virtual PP, CP, EP, expert TP) = "
                f"{current}; "
                f"this role asks for {wanted}: roles sharing a process must use the same sizes"
            )
        return
    ps.initialize_model_parallel(
        tensor_model_parallel_size=options.tp,
        pipeline_model_parallel_size=options.pp,
        virtual_pipeline_model_parallel_size=options.vpp,
        context_parallel_size=options.cp,
        expert_model_parallel_size=options.ep,
        expert_tensor_parallel_size=options.expert_tp,
    )


def context_parallel() -> ContextParallel:
    """This rank's CP group (size 1 without context parallelism)."""
    group = ps.get_context_parallel_group()
    return ContextParallel(dist.get_world_size(group), dist.get_rank(group), group)


def seed_model_parallel_rng() -> None:
    """Megatron's CUDA RNG tracker (dropout inside and outside TP regions) from world rank 0's seed,
    which the worker set (training_args.seed or the pipeline seed)."""
    seed = [torch.initial_seed() % 2**31]
    dist.broadcast_object_list(seed, src=0)
    tensor_parallel.model_parallel_cuda_manual_seed(seed[0])


def layer_spec(use_te: bool, cp: int = 1, model: Mapping[str, Any] | None = None) -> ModuleSpec:
    """Transformer Engine layers when TE is installed, megatron-core's own otherwise; attention takes
    the explicit (causal + padding) mask. With cp > 1 the core attention is AllGatherKVAttention (also
    under TE: its ring attention takes causal masks only, not our padding mask; docs/decisions/0058).
    `model`: the spec's model switches (megatron_config.layer_spec_kwargs: q/k norms, experts)."""
    spec = (
        get_gpt_layer_with_transformer_engine_spec(**(model or {}))
        if use_te
        else get_gpt_layer_local_spec(normalization="RMSNorm", **(model or {}))
    )
    spec.submodules.self_attention.params["attn_mask_type"] = AttnMaskType.arbitrary
    if cp > 1:
        spec.submodules.self_attention.submodules.core_attention = AllGatherKVAttention
    return spec


class AllGatherKVAttention(MegatronModule):
    """Core attention for cp > 1 (DotProductAttention's signature, which refuses cp > 1): gathers the
    keys and values of the CP group (trainer.train.megatron_cp.gather_sequence), then
    megatron_cp.attend. Its mask holds this rank's query rows of the whole sequence's causal +
    padding mask ([b, 1, s / cp, s]: the strategy splits it with the inputs)."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: Any = None,
    ) -> None:
        super().__init__(config=config)
        if config.apply_query_key_layer_scaling or config.softmax_type != "vanilla":
            raise ValueError(
                "context parallelism (all-gather-KV attention) computes plain softmax attention only: "
                "no apply_query_key_layer_scaling, softmax_type vanilla"
            )
        self.softmax_scale = softmax_scale if softmax_scale is not None else config.kv_channels**-0.5
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.cp = context_parallel()

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: Tensor | None = None,
        packed_seq_params: Any = None,
    ) -> Tensor:
        if packed_seq_params is not None or attention_bias is not None or attention_mask is None:
            raise ValueError(
                "all-gather-KV attention takes padded rows with an explicit mask: no packed sequences, no bias"
            )
        key, value = gather_sequence(key, self.cp, 0), gather_sequence(value, self.cp, 0)
        if self.dropout > 0 and self.training:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                return attend(query, key, value, attention_mask, self.softmax_scale, self.dropout, True)
        return attend(query, key, value, attention_mask, self.softmax_scale)


class ValueHead(nn.Module):
    """A critic's scalar head in the place of GPTModel's output layer (replicated over TP ranks);
    with sequence parallelism it first gathers the sequence."""

    def __init__(self, hidden_size: int, sequence_parallel: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, hidden_size))
        self.bias = nn.Parameter(torch.zeros(1))
        self.sequence_parallel = sequence_parallel

    def forward(
        self, hidden: Tensor, weight: Tensor | None = None, runtime_gather_output: bool | None = None
    ) -> tuple[Tensor, None]:
        if self.sequence_parallel:
            hidden = tensor_parallel.gather_from_sequence_parallel_region(hidden)
        return nn.functional.linear(hidden, self.weight, self.bias), None


def build_chunks(
    config: TransformerConfig, layout: GPTLayout, hf_config: Any, options: MegatronOptions
) -> list[GPTModel]:
    """This rank's GPTModel chunks (one, or one per virtual pipeline stage)."""
    spec = layer_spec(HAVE_TE, options.cp, layer_spec_kwargs(layout, options, te=HAVE_TE))
    chunks = []
    for vp in range(options.vpp or 1):
        vp_stage = vp if options.vpp else None
        model = GPTModel(
            config=config,
            transformer_layer_spec=spec,
            vp_stage=vp_stage,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp_stage),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp_stage),
            **gpt_model_kwargs(layout, hf_config, options.tp),
        )
        if layout.head == "value" and model.post_process:
            model.output_layer = ValueHead(layout.hidden_size, config.sequence_parallel)
        chunks.append(model)
    return chunks


def unwrap(module: nn.Module) -> GPTModel:
    """The GPTModel inside DDP / Float16Module wrappers."""
    inner: Any = module
    while hasattr(inner, "module"):
        inner = inner.module
    return inner


def global_layers(model: GPTModel) -> list[int]:
    """The 0-based global index of each of this chunk's layers (Megatron numbers them from 1)."""
    return [layer.layer_number - 1 for layer in model.decoder.layers]


def load_exactly(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """load_state_dict, allowing only Transformer Engine's `_extra_state` entries and LoRA adapters (which
    keep their own values: a Hugging Face model or an init checkpoint holds none) to be missing."""
    missing, unexpected = model.load_state_dict(dict(state), strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state") and not is_adapter_key(k)]
    if missing or unexpected:
        raise RuntimeError(
            f"converted weights do not fit the Megatron model: missing {missing}, unexpected {unexpected}"
        )


def load_hf_weights(
    chunks: list[GPTModel],
    hf_state: Mapping[str, Tensor],
    layout: GPTLayout,
    tp_rank: int,
    tp_size: int,
    grouped_gemm: bool = False,
) -> None:
    """Each chunk's converted HF weights; an MoE model's experts those of this EP / expert-TP rank."""
    for model in chunks:
        state = hf_to_megatron(
            hf_state,
            layout,
            tp_rank=tp_rank,
            tp_size=tp_size,
            layers=global_layers(model),
            pre_process=model.pre_process,
            post_process=model.post_process,
            ep_rank=ps.get_expert_model_parallel_rank(),
            ep_size=ps.get_expert_model_parallel_world_size(),
            etp_rank=ps.get_expert_tensor_parallel_rank(),
            etp_size=ps.get_expert_tensor_parallel_world_size(),
        )
        load_exactly(model, to_te_names(state, layout, grouped_gemm) if HAVE_TE else state)
