"""Hugging Face <-> Megatron-core weights for the Qwen2, Qwen3 and Llama architectures: pure functions of
state dicts (torch only; megatron-core is not imported), so every layout rule is testable on CPU.

Megatron's GPTModel (local layer spec) names one decoder layer's tensors, on tensor-parallel rank r of T:

    input_layernorm.weight            HF input_layernorm.weight                        replicated
    self_attention.linear_qkv.weight  fused [q_0; k_0; v_0; q_1; k_1; v_1; …]          rows split in T
    self_attention.linear_qkv.bias    the same fusion of the q/k/v biases (Qwen2)      rows split in T
    self_attention.linear_proj.weight HF o_proj.weight                                 columns split in T
    pre_mlp_layernorm.weight          HF post_attention_layernorm.weight               replicated
    mlp.linear_fc1.weight             [gate_r; up_r] (each of gate/up split in T)      rows
    mlp.linear_fc2.weight             HF down_proj.weight                              columns split in T
    self_attention.q_layernorm.weight HF self_attn.q_norm.weight (Qwen3, per head_dim)  replicated
    self_attention.k_layernorm.weight HF self_attn.k_norm.weight (Qwen3)               replicated

where q_g is query group g's num_heads/num_kv_heads query heads and k_g, v_g its one key and value
head (grouped-query attention). With T > num_kv_heads Megatron keeps the same fused layout, each rank
holding 1/T of its rows (it all-gathers them at run time), so the rule "fuse, then split the rows" holds.

Qwen3-MoE (megatron-core's MoELayer, every layer sparse): the MLP rows above become

    mlp.router.weight                                HF mlp.gate.weight [E, hidden]        replicated
    mlp.experts.local_experts.<j>.linear_fc1.weight  HF experts.gate_up_proj[e] = [gate; up], each
                                                     of gate/up split in the expert-TP size ETP
    mlp.experts.local_experts.<j>.linear_fc2.weight  HF experts.down_proj[e], columns split in ETP

for expert e = ep_rank · E/EP + j on expert-parallel rank ep_rank of EP (transformers 5 holds the experts
fused, [E, 2·moe_intermediate, hidden] and [E, hidden, moe_intermediate]). `pre_mlp_layernorm` stays a
norm of its own under Transformer Engine too (megatron's MoE spec does not fuse it), and TE's grouped
GEMM names expert j's weights `mlp.experts.linear_fc<n>.weight<j>` (`to_te_names`).

Outside the layers: `embedding.word_embeddings.weight` (first pipeline stage) and `output_layer.weight`
(last stage) are split by vocabulary rows, padded with zero rows to a multiple of T; the last stage
also holds `decoder.final_layernorm.weight`. Tied embeddings: Megatron keeps no output layer on a
single stage, and a copy on the last stage when the pipeline has several (its embedding group keeps
the two equal). A critic's value head [1, hidden] (+ bias) is `output_layer.*`, replicated.
Transformer Engine's spec fuses the two norms into the next linear (`to_te_names`).

Layers are named by their index on the stage (`decoder.layers.<i>`); the caller passes the global
layer of each (`layers`), so any split Megatron makes across pipeline (and virtual) stages works.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from trainer.config.registries import MEGATRON_MODEL_TYPES

ARCHITECTURES = MEGATRON_MODEL_TYPES
Head = Literal["lm", "value"]

EMBEDDING = "embedding.word_embeddings.weight"
FINAL_NORM = "decoder.final_layernorm.weight"
OUTPUT = "output_layer.weight"
OUTPUT_BIAS = "output_layer.bias"
LAYER_PREFIX = "decoder.layers."
# local spec name -> Transformer Engine spec name (the norm fused into the following linear)
TE_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}


@dataclass(frozen=True)
class GPTLayout:
    """The shapes a conversion needs, read from a Hugging Face config (`gpt_layout`)."""

    arch: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tied_embeddings: bool
    qkv_bias: bool
    head: Head = "lm"
    qk_norm: bool = False  # Qwen3's q_norm / k_norm: megatron's qk_layernorm
    num_experts: int = 0  # 0: dense; Qwen3-MoE: every layer's MLP is a mixture of this many experts
    moe_topk: int = 0  # experts per token (num_experts_per_tok)
    moe_ffn_hidden_size: int = 0  # one expert's intermediate size (moe_intermediate_size)
    norm_topk_prob: bool = False  # the top-k probabilities renormalised to sum to 1
    aux_loss_coef: float = 0.0  # router_aux_loss_coef

    @property
    def moe(self) -> bool:
        return self.num_experts > 0

    @property
    def heads_per_group(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def hf_prefix(self) -> str:
        """Where the decoder lives in the HF state dict: a causal LM's `model.`, a ValueModel's
        `backbone.`."""
        return "model." if self.head == "lm" else "backbone."


def gpt_layout(config: Any, head: Head = "lm") -> GPTLayout:
    """The layout of a Qwen2, Qwen3 or Llama `PretrainedConfig`; anything Megatron's GPTModel would
    compute differently is refused by name."""
    arch = getattr(config, "model_type", None)
    if arch not in ARCHITECTURES:
        raise ValueError(
            f"Megatron conversion supports model_type {', '.join(ARCHITECTURES)}; this model is {arch!r}"
        )
    if config.hidden_act != "silu":
        raise ValueError(
            f"{arch}: hidden_act={config.hidden_act!r}; the Megatron conversion builds a SwiGLU (silu) MLP"
        )
    if arch == "qwen3" and config.attention_bias:
        raise ValueError(
            "qwen3 with attention_bias: Megatron's GPTModel cannot give o_proj a bias without giving "
            "the MLP one too; only bias-free Qwen3 models (every released one) convert"
        )
    if arch == "llama" and (config.attention_bias or config.mlp_bias):
        raise ValueError(
            "llama with attention_bias or mlp_bias: Megatron's GPTModel cannot give o_proj a bias "
            "without giving the MLP one too; only bias-free Llama models convert"
        )
    if arch == "qwen3_moe":
        check_moe_layers(config)
    num_kv_heads = config.num_key_value_heads or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return GPTLayout(
        arch=arch,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        num_heads=config.num_attention_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        ffn_hidden_size=config.intermediate_size,
        vocab_size=config.vocab_size,
        tied_embeddings=bool(config.tie_word_embeddings) and head == "lm",
        qkv_bias=arch == "qwen2",
        head=head,
        qk_norm=arch in ("qwen3", "qwen3_moe"),
        **(moe_fields(config) if arch == "qwen3_moe" else {}),
    )


def check_moe_layers(config: Any) -> None:
    """Refuse a Qwen3-MoE whose layers are not all sparse: mlp_only_layers / decoder_sparse_step make
    dense layers between the MoE ones, which this conversion does not build (megatron's
    moe_layer_freq pattern would; no released Qwen3-MoE uses it)."""
    if list(getattr(config, "mlp_only_layers", None) or []) or getattr(config, "decoder_sparse_step", 1) != 1:
        raise ValueError(
            f"qwen3_moe with mlp_only_layers={config.mlp_only_layers} / decoder_sparse_step="
            f"{config.decoder_sparse_step}: dense layers among the MoE layers are not converted to Megatron; "
            "every layer must be sparse (mlp_only_layers [], decoder_sparse_step 1)"
        )


def moe_fields(config: Any) -> dict[str, Any]:
    """GPTLayout's mixture-of-experts fields from a Qwen3-MoE config."""
    return {
        "num_experts": config.num_experts,
        "moe_topk": config.num_experts_per_tok,
        "moe_ffn_hidden_size": config.moe_intermediate_size,
        "norm_topk_prob": bool(config.norm_topk_prob),
        "aux_loss_coef": float(config.router_aux_loss_coef),
    }


def padded_vocab_size(vocab_size: int, tp: int) -> int:
    """The vocabulary Megatron's vocab-parallel layers hold: the next multiple of the TP size."""
    return -(-vocab_size // tp) * tp


def check_tensor_parallel(layout: GPTLayout, tp: int) -> None:
    """Raise, naming the sizes, when `tp` cannot split this model's heads and MLP."""
    problems = []
    if layout.num_heads % tp:
        problems.append(f"num_attention_heads={layout.num_heads} is not a multiple of it")
    if layout.num_kv_heads % tp and tp % layout.num_kv_heads:
        problems.append(
            f"num_key_value_heads={layout.num_kv_heads} neither divides it nor is a multiple of it"
        )
    if layout.ffn_hidden_size % tp and not layout.moe:  # an MoE model's experts: check_model_parallel
        problems.append(f"intermediate_size={layout.ffn_hidden_size} is not a multiple of it")
    if problems:
        raise ValueError(
            f"tensor_model_parallel_size={tp} does not fit this {layout.arch} model: {'; '.join(problems)}"
        )


# --------------------------------------------------------------------------------------------
# tensor pieces


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, layout: GPTLayout) -> Tensor:
    """[q_0; k_0; v_0; q_1; …] per query group, for weights [rows, hidden] and biases [rows] alike."""
    groups, width = layout.num_kv_heads, layout.head_dim
    rest = q.shape[1:]
    parts = (
        q.reshape(groups, layout.heads_per_group * width, *rest),
        k.reshape(groups, width, *rest),
        v.reshape(groups, width, *rest),
    )
    return torch.cat(parts, dim=1).reshape(-1, *rest)


def split_qkv(fused: Tensor, layout: GPTLayout) -> tuple[Tensor, Tensor, Tensor]:
    """The inverse of fuse_qkv: (q, k, v) in Hugging Face's layout."""
    groups, width = layout.num_kv_heads, layout.head_dim
    rest = fused.shape[1:]
    grouped = fused.reshape(groups, (layout.heads_per_group + 2) * width, *rest)
    q, k, v = grouped.split([layout.heads_per_group * width, width, width], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def shard(tensor: Tensor, dim: int, tp: int, rank: int) -> Tensor:
    """Rank `rank`'s contiguous 1/tp of `tensor` along `dim` (a copy, so it owns its memory)."""
    if tensor.shape[dim] % tp:
        raise ValueError(f"cannot split dim {dim} of shape {tuple(tensor.shape)} into {tp} equal parts")
    return tensor.chunk(tp, dim=dim)[rank].clone()


def pad_rows(tensor: Tensor, rows: int) -> Tensor:
    """`tensor` with zero rows appended up to `rows` (the padded vocabulary)."""
    if tensor.shape[0] == rows:
        return tensor
    return torch.cat([tensor, tensor.new_zeros(rows - tensor.shape[0], *tensor.shape[1:])])


# --------------------------------------------------------------------------------------------
# Hugging Face -> Megatron


def local_experts(layout: GPTLayout, ep_rank: int, ep_size: int) -> range:
    """The global experts expert-parallel rank `ep_rank` of `ep_size` holds: e = ep_rank·E/EP + j."""
    per_rank = layout.num_experts // ep_size
    return range(ep_rank * per_rank, (ep_rank + 1) * per_rank)


def hf_experts_to_megatron(
    hf: Mapping[str, Tensor],
    layer: int,
    layout: GPTLayout,
    *,
    ep_rank: int,
    ep_size: int,
    etp_rank: int,
    etp_size: int,
) -> dict[str, Tensor]:
    """Global layer `layer`'s router and this EP / expert-TP rank's experts (names relative to the layer)."""
    mlp = f"{layout.hf_prefix}layers.{layer}.mlp."
    out = {"mlp.router.weight": hf[f"{mlp}gate.weight"].clone()}
    for j, e in enumerate(local_experts(layout, ep_rank, ep_size)):
        gate, up = hf[f"{mlp}experts.gate_up_proj"][e].chunk(2, dim=0)
        name = f"mlp.experts.local_experts.{j}."
        out[f"{name}linear_fc1.weight"] = torch.cat(
            [shard(gate, 0, etp_size, etp_rank), shard(up, 0, etp_size, etp_rank)]
        )
        out[f"{name}linear_fc2.weight"] = shard(hf[f"{mlp}experts.down_proj"][e], 1, etp_size, etp_rank)
    return out


def megatron_experts_to_hf(
    parts: Sequence[Sequence[Mapping[str, Tensor]]], layer: int, layout: GPTLayout
) -> dict[str, Tensor]:
    """Global layer `layer`'s router and experts in HF names from `parts[ep][etp]`, the layer's tensors
    (names relative to it) on every expert-parallel rank ep and expert-TP rank etp."""
    dst = f"{layout.hf_prefix}layers.{layer}.mlp."
    gate_up, down = [], []
    for ep, ranks in enumerate(parts):
        for j, _ in enumerate(local_experts(layout, ep, len(parts))):
            name = f"mlp.experts.local_experts.{j}."
            gates, ups = zip(*(p[f"{name}linear_fc1.weight"].chunk(2, dim=0) for p in ranks), strict=True)
            gate_up.append(torch.cat([*gates, *ups]))
            down.append(torch.cat([p[f"{name}linear_fc2.weight"] for p in ranks], dim=1))
    return {
        f"{dst}gate.weight": parts[0][0]["mlp.router.weight"].clone(),
        f"{dst}experts.gate_up_proj": torch.stack(gate_up),
        f"{dst}experts.down_proj": torch.stack(down),
    }


def is_expert_key(name: str) -> bool:
    """A layer tensor (name relative to the layer) that megatron_experts_to_hf converts."""
    return name.startswith(("mlp.experts.", "mlp.router."))


def hf_layer_to_megatron(
    hf: Mapping[str, Tensor],
    layer: int,
    layout: GPTLayout,
    *,
    tp_rank: int,
    tp_size: int,
    ep_rank: int = 0,
    ep_size: int = 1,
    etp_rank: int | None = None,
    etp_size: int | None = None,
) -> dict[str, Tensor]:
    """Global layer `layer` of the HF state dict as TP rank `tp_rank`'s Megatron tensors (names
    relative to `decoder.layers.<i>.`); an MoE layer's experts those of EP rank `ep_rank` and expert-TP
    rank `etp_rank` (unset: the TP rank and size, megatron's default)."""
    src = f"{layout.hf_prefix}layers.{layer}."
    attn, mlp = f"{src}self_attn.", f"{src}mlp."

    def fused(suffix: str) -> Tensor:
        return fuse_qkv(
            hf[f"{attn}q_proj.{suffix}"], hf[f"{attn}k_proj.{suffix}"], hf[f"{attn}v_proj.{suffix}"], layout
        )

    out = {
        "input_layernorm.weight": hf[f"{src}input_layernorm.weight"].clone(),
        "self_attention.linear_qkv.weight": shard(fused("weight"), 0, tp_size, tp_rank),
        "self_attention.linear_proj.weight": shard(hf[f"{attn}o_proj.weight"], 1, tp_size, tp_rank),
        "pre_mlp_layernorm.weight": hf[f"{src}post_attention_layernorm.weight"].clone(),
    }
    if layout.moe:
        out |= hf_experts_to_megatron(
            hf,
            layer,
            layout,
            ep_rank=ep_rank,
            ep_size=ep_size,
            etp_rank=tp_rank if etp_rank is None else etp_rank,
            etp_size=tp_size if etp_size is None else etp_size,
        )
    else:
        out["mlp.linear_fc1.weight"] = torch.cat(
            [
                shard(hf[f"{mlp}gate_proj.weight"], 0, tp_size, tp_rank),
                shard(hf[f"{mlp}up_proj.weight"], 0, tp_size, tp_rank),
            ]
        )
        out["mlp.linear_fc2.weight"] = shard(hf[f"{mlp}down_proj.weight"], 1, tp_size, tp_rank)
    if layout.qkv_bias:
        out["self_attention.linear_qkv.bias"] = shard(fused("bias"), 0, tp_size, tp_rank)
    if layout.qk_norm:  # one head_dim vector applied to every head: each TP rank holds it whole
        out["self_attention.q_layernorm.weight"] = hf[f"{attn}q_norm.weight"].clone()
        out["self_attention.k_layernorm.weight"] = hf[f"{attn}k_norm.weight"].clone()
    return out


def hf_to_megatron(
    hf: Mapping[str, Tensor],
    layout: GPTLayout,
    *,
    tp_rank: int,
    tp_size: int,
    layers: Sequence[int],
    pre_process: bool,
    post_process: bool,
    ep_rank: int = 0,
    ep_size: int = 1,
    etp_rank: int | None = None,
    etp_size: int | None = None,
) -> dict[str, Tensor]:
    """The state dict of one Megatron model chunk: TP rank `tp_rank` of `tp_size`, holding the global
    layers `layers` (in order), the embedding when `pre_process` (first stage) and the final norm and
    output layer when `post_process` (last stage); an MoE model's experts of EP rank `ep_rank` (and
    expert-TP rank `etp_rank`, unset: the TP rank)."""
    check_tensor_parallel(layout, tp_size)
    vocab = padded_vocab_size(layout.vocab_size, tp_size)
    embed = hf[f"{layout.hf_prefix}embed_tokens.weight"]
    out: dict[str, Tensor] = {}
    if pre_process:
        out[EMBEDDING] = shard(pad_rows(embed, vocab), 0, tp_size, tp_rank)
    for index, layer in enumerate(layers):
        converted = hf_layer_to_megatron(
            hf,
            layer,
            layout,
            tp_rank=tp_rank,
            tp_size=tp_size,
            ep_rank=ep_rank,
            ep_size=ep_size,
            etp_rank=etp_rank,
            etp_size=etp_size,
        )
        for name, tensor in converted.items():
            out[f"{LAYER_PREFIX}{index}.{name}"] = tensor
    if post_process:
        out[FINAL_NORM] = hf[f"{layout.hf_prefix}norm.weight"].clone()
        if layout.head == "value":
            out[OUTPUT] = hf["value_head.weight"].clone()
            out[OUTPUT_BIAS] = hf["value_head.bias"].clone()
        elif not (layout.tied_embeddings and pre_process):
            output = embed if layout.tied_embeddings else hf["lm_head.weight"]
            out[OUTPUT] = shard(pad_rows(output, vocab), 0, tp_size, tp_rank)
    return out


# --------------------------------------------------------------------------------------------
# Megatron -> Hugging Face


def megatron_layer_to_hf(
    parts: Sequence[Mapping[str, Tensor]], layer: int, layout: GPTLayout
) -> dict[str, Tensor]:
    """One decoder layer from its tensors on every TP rank (`parts[r]`, names relative to
    `decoder.layers.<i>.`), as global layer `layer` in Hugging Face names."""
    dst = f"{layout.hf_prefix}layers.{layer}."
    out = {
        f"{dst}input_layernorm.weight": parts[0]["input_layernorm.weight"].clone(),
        f"{dst}post_attention_layernorm.weight": parts[0]["pre_mlp_layernorm.weight"].clone(),
        f"{dst}self_attn.o_proj.weight": torch.cat(
            [p["self_attention.linear_proj.weight"] for p in parts], dim=1
        ),
    }
    if layout.qk_norm:
        out[f"{dst}self_attn.q_norm.weight"] = parts[0]["self_attention.q_layernorm.weight"].clone()
        out[f"{dst}self_attn.k_norm.weight"] = parts[0]["self_attention.k_layernorm.weight"].clone()
    if not layout.moe:  # an MoE layer's router and experts: megatron_experts_to_hf
        gates, ups = zip(*(p["mlp.linear_fc1.weight"].chunk(2, dim=0) for p in parts), strict=True)
        out[f"{dst}mlp.gate_proj.weight"] = torch.cat(gates)
        out[f"{dst}mlp.up_proj.weight"] = torch.cat(ups)
        out[f"{dst}mlp.down_proj.weight"] = torch.cat([p["mlp.linear_fc2.weight"] for p in parts], dim=1)
    for suffix in ("weight", "bias") if layout.qkv_bias else ("weight",):
        q, k, v = split_qkv(torch.cat([p[f"self_attention.linear_qkv.{suffix}"] for p in parts]), layout)
        for name, tensor in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
            out[f"{dst}self_attn.{name}.{suffix}"] = tensor.clone()
    return out


def megatron_edges_to_hf(
    first: Sequence[Mapping[str, Tensor]] | None,
    last: Sequence[Mapping[str, Tensor]] | None,
    layout: GPTLayout,
) -> dict[str, Tensor]:
    """The tensors outside the layers: the embedding from the first stage's TP ranks (`first`), the
    final norm and output layer from the last stage's (`last`); either may be None (not on this
    stage). The padded vocabulary rows are dropped."""
    out: dict[str, Tensor] = {}
    if first is not None:
        embed = torch.cat([p[EMBEDDING] for p in first])[: layout.vocab_size].clone()
        out[f"{layout.hf_prefix}embed_tokens.weight"] = embed
        if layout.tied_embeddings:
            out["lm_head.weight"] = embed
    if last is not None:
        out[f"{layout.hf_prefix}norm.weight"] = last[0][FINAL_NORM].clone()
        if layout.head == "value":
            out["value_head.weight"] = last[0][OUTPUT].clone()
            out["value_head.bias"] = last[0][OUTPUT_BIAS].clone()
        elif not layout.tied_embeddings:
            out["lm_head.weight"] = torch.cat([p[OUTPUT] for p in last])[: layout.vocab_size].clone()
    return out


def layer_tensors(state: Mapping[str, Tensor], index: int) -> dict[str, Tensor]:
    """Local layer `index`'s tensors of a chunk's state dict, named relative to the layer."""
    prefix = f"{LAYER_PREFIX}{index}."
    return {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}


def megatron_to_hf(
    stages: Sequence[Sequence[Mapping[str, Tensor]]], stage_layers: Sequence[Sequence[int]], layout: GPTLayout
) -> dict[str, Tensor]:
    """The whole HF state dict from every chunk's state dicts: `stages[s][r]` is stage s's chunk on
    TP rank r, holding the global layers `stage_layers[s]` (stages in pipeline order; with virtual
    pipeline stages, one entry per model chunk in layer order)."""
    out = megatron_edges_to_hf(stages[0], stages[-1], layout)
    for chunks, layers in zip(stages, stage_layers, strict=True):
        for index, layer in enumerate(layers):
            tensors = [layer_tensors(c, index) for c in chunks]
            out.update(megatron_layer_to_hf(tensors, layer, layout))
            if layout.moe:  # one expert-parallel rank, expert TP = TP
                out.update(megatron_experts_to_hf([tensors], layer, layout))
    return out


def stage_layers(num_layers: int, pp: int) -> list[list[int]]:
    """Megatron's even split of the layers over `pp` pipeline stages (num_layers % pp == 0)."""
    if num_layers % pp:
        raise ValueError(
            f"num_hidden_layers={num_layers} does not split evenly over pipeline_model_parallel_size={pp}"
        )
    per_stage = num_layers // pp
    return [list(range(s * per_stage, (s + 1) * per_stage)) for s in range(pp)]


def te_names(layout: GPTLayout | None = None, grouped_gemm: bool = False) -> dict[str, str]:
    """Local-spec name -> Transformer Engine spec name of one layer's tensors: each norm fused into the
    linear after it, except an MoE layer's pre-MLP norm (megatron's MoE spec keeps it a norm); with the
    grouped GEMM, expert j's `local_experts.<j>.linear_fc<n>.weight` is `linear_fc<n>.weight<j>`."""
    if layout is None or not layout.moe:
        return dict(TE_NAMES)
    names = {k: v for k, v in TE_NAMES.items() if k != "pre_mlp_layernorm.weight"}
    if grouped_gemm:
        for j in range(layout.num_experts):  # at most E local experts on a rank
            for fc in ("linear_fc1", "linear_fc2"):
                names[f"mlp.experts.local_experts.{j}.{fc}.weight"] = f"mlp.experts.{fc}.weight{j}"
    return names


def to_te_names(
    state: Mapping[str, Tensor], layout: GPTLayout | None = None, grouped_gemm: bool = False
) -> dict[str, Tensor]:
    """Local-spec names -> Transformer Engine spec names (te_names)."""
    names = te_names(layout, grouped_gemm)
    return {_rename_layer_key(key, names): value for key, value in state.items()}


def from_te_names(
    state: Mapping[str, Tensor], layout: GPTLayout | None = None, grouped_gemm: bool = False
) -> dict[str, Tensor]:
    inverse = {te: local for local, te in te_names(layout, grouped_gemm).items()}
    return {_rename_layer_key(key, inverse): value for key, value in state.items()}


def _rename_layer_key(key: str, names: Mapping[str, str]) -> str:
    if not key.startswith(LAYER_PREFIX):
        return key
    index, _, rest = key[len(LAYER_PREFIX) :].partition(".")
    return f"{LAYER_PREFIX}{index}.{names.get(rest, rest)}"
