"""LoRA on megatron-core's linear layers for `megatron_train` (docs/decisions/0054).

megatron-core has no LoRA and PEFT adapts Hugging Face modules only; the design follows Megatron-Bridge's PEFT
(an adapter beside each parallel linear layer, the base frozen) with PolicyLab's conventions
(trainer.models.lora): the role hands the strategy the Hugging Face model with PEFT's adapters injected
(`add_lora`), and this module moves them onto the megatron layers and back.

- HF → megatron: q/k/v_proj → `self_attention.linear_qkv` (fused per query group; each targeted projection
  keeps its own A and B, and adds only to its rows, so a partial q/k/v target adapts exactly what PEFT adapts),
  o_proj → `linear_proj`, gate/up_proj → `mlp.linear_fc1` (the [gate; up] rows), down_proj → `linear_fc2`.
  A module outside these seven (an expert, a router, lm_head) is refused naming the override.
- The adapter hangs on the linear layer as its child `lora` (`<linear>.lora.a.<proj>`, `.b.<proj>`), so the
  base weights keep megatron's names; a forward hook adds scaling · B @ A @ dropout(x) to the layer's output.
- Tensor parallelism: a column-parallel layer (qkv, fc1) keeps A whole and B sharded on its output rows
  like the base; a row-parallel layer (proj, fc2) keeps A sharded on its input columns and B whole. The low-rank
  activations are reduced across TP where the base reduces (row) or where A's gradient needs the sum over
  the B shards (column). With sequence parallelism the replicated factor whose gradient is partial is marked
  `sequence_parallel`, which megatron's finalize_model_grads all-reduces over TP.
- Transformer Engine fuses the norm into linear_qkv / linear_fc1: the adapter then normalises the input
  itself with the layer's `layer_norm_weight` (PEFT adapts the normed input).
- Weights out: `lora_hf_tensors` gives A and B under PEFT's names and the adapted bases as
  `<module>.base_layer.*`, so the actor's `merge_lora` (engine sync, HF export) and `save_adapter` are the
  ones every other strategy uses. Checkpoints: the adapters are part of the model's sharded state (A/B shard
  axes declared), the base travels too, so a resume restores them exactly.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from torch import Tensor, nn

from trainer.models.lora import ADAPTER, lora_layers, lora_part, plain_name
from trainer.models.megatron_convert import GPTLayout, shard

ATTN, MLP = "self_attention.", "mlp."
# HF module (relative to a layer) -> (megatron linear, projection); the projections of one fused layer in row order
HF_TO_MEGATRON: dict[str, tuple[str, str]] = {
    "self_attn.q_proj": (f"{ATTN}linear_qkv", "q_proj"),
    "self_attn.k_proj": (f"{ATTN}linear_qkv", "k_proj"),
    "self_attn.v_proj": (f"{ATTN}linear_qkv", "v_proj"),
    "self_attn.o_proj": (f"{ATTN}linear_proj", "o_proj"),
    "mlp.gate_proj": (f"{MLP}linear_fc1", "gate_proj"),
    "mlp.up_proj": (f"{MLP}linear_fc1", "up_proj"),
    "mlp.down_proj": (f"{MLP}linear_fc2", "down_proj"),
}
ROW_PARALLEL = (f"{ATTN}linear_proj", f"{MLP}linear_fc2")
DENSE_TARGET = ",".join(module.split(".")[1] for module in HF_TO_MEGATRON)


class _PeftScaling(Protocol):
    """The one attribute of PEFT's LoraLayer read here that is not a submodule (peft ships no types here)."""

    scaling: dict[str, float]


@dataclass(frozen=True)
class LoraSpec:
    """What PEFT injected into the HF model: per global layer, the megatron linear -> {projection: (A, B)}."""

    scaling: float
    dropout: float
    dtype: (
        torch.dtype
    )  # the adapters' (float32 under a 16-bit model with autocast_adapter_dtype, as PEFT keeps them)
    adapters: dict[int, dict[str, dict[str, tuple[Tensor, Tensor]]]]
    hf_modules: dict[tuple[int, str], str]  # (layer, projection) -> the HF module name


def lora_spec(model: nn.Module, layout: GPTLayout) -> LoraSpec | None:
    """The adapters PEFT injected into `model` (None without LoRA); refuses what megatron_train does not adapt."""
    layers = lora_layers(model)
    if not layers:
        return None
    if any(".modules_to_save." in name for name, _ in model.named_parameters()):
        raise ValueError(
            "model_args.additional_target on megatron_train is not built (its names are Hugging Face "
            "modules); remove it"
        )
    if layout.head != "lm":
        raise ValueError("LoRA on a megatron_train critic is not built; train the critic without lora_target")
    pattern = re.compile(rf"^{re.escape(layout.hf_prefix)}layers\.(\d+)\.(.+)$")
    state = model.state_dict()
    scalings, dropouts = set(), set()
    adapters: dict[int, dict[str, dict[str, tuple[Tensor, Tensor]]]] = {}
    hf_modules: dict[tuple[int, str], str] = {}
    for name, layer in layers.items():
        match = pattern.match(name)
        if match is None or match.group(2) not in HF_TO_MEGATRON:
            raise ValueError(
                f"model_args.lora_target adapts {name}, which LoRA on megatron_train does not build "
                f"(it adapts the attention and dense MLP projections: q/k/v/o_proj, gate/up/down_proj); "
                f"name them instead: override actor_train.model_args.lora_target={DENSE_TARGET} (a "
                "mixture-of-experts model: q_proj,k_proj,v_proj,o_proj)"
            )
        index, (linear, proj) = int(match.group(1)), HF_TO_MEGATRON[match.group(2)]
        scalings.add(float(cast(_PeftScaling, layer).scaling[ADAPTER]))
        drop = layer.get_submodule(f"lora_dropout.{ADAPTER}")
        dropouts.add(float(drop.p) if isinstance(drop, nn.Dropout) else 0.0)
        pair = (state[f"{name}.lora_A.{ADAPTER}.weight"], state[f"{name}.lora_B.{ADAPTER}.weight"])
        adapters.setdefault(index, {}).setdefault(linear, {})[proj] = pair
        hf_modules[(index, proj)] = name
    if len(scalings) > 1 or len(dropouts) > 1:
        raise ValueError(
            f"LoRA on megatron_train: one scaling and dropout for every layer, got {scalings}, {dropouts}"
        )
    dtype = next(iter(layers.values())).get_parameter(f"lora_A.{ADAPTER}.weight").dtype
    return LoraSpec(scalings.pop(), dropouts.pop(), dtype, adapters, hf_modules)


def base_state(hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A LoRA model's state dict as the plain model's, without the adapters (what megatron's converter reads)."""
    out = {}
    for name, tensor in hf_state.items():
        if lora_part(name)[1] in ("lora_A", "lora_B"):
            continue
        plain = plain_name(name)
        if plain is not None:
            out[plain] = tensor
    return out


# --------------------------------------------------------------------------------------------
# the adapter beside a megatron linear layer


def _projection_widths(linear: str, layout: GPTLayout, tp: int) -> tuple[int, list[tuple[str, int]]]:
    """(groups, [(projection, rows per group)]): how the layer's local output rows interleave its projections."""
    if linear == f"{ATTN}linear_qkv":
        width = layout.head_dim
        return layout.num_kv_heads // tp, [
            ("q_proj", layout.heads_per_group * width),
            ("k_proj", width),
            ("v_proj", width),
        ]
    if linear == f"{MLP}linear_fc1":
        rows = layout.ffn_hidden_size // tp
        return 1, [("gate_proj", rows), ("up_proj", rows)]
    return 1, [(HF_NAME_OF[linear], layout.hidden_size)]


HF_NAME_OF = {f"{ATTN}linear_proj": "o_proj", f"{MLP}linear_fc2": "down_proj"}


class LoraAdapter(nn.Module):
    """A and B of each adapted projection of one megatron linear layer, this TP rank's shards."""

    def __init__(
        self,
        linear: str,
        pairs: Mapping[str, tuple[Tensor, Tensor]],
        layout: GPTLayout,
        *,
        scaling: float,
        dropout: float,
        tp_rank: int,
        tp_size: int,
        sequence_parallel: bool,
    ) -> None:
        from megatron.core.tensor_parallel import set_tensor_model_parallel_attributes

        super().__init__()
        self.row = linear in ROW_PARALLEL
        self.groups, self.widths = _projection_widths(linear, layout, tp_size)
        self.scaling, self.dropout, self.tp, self.sequence_parallel = (
            scaling,
            dropout,
            tp_size,
            sequence_parallel,
        )
        self.a, self.b = nn.ParameterDict(), nn.ParameterDict()
        for proj, (a, b) in pairs.items():
            a = shard(a, 1, tp_size, tp_rank) if self.row else a.clone()
            b = b.clone() if self.row else shard(b, 0, tp_size, tp_rank)
            self.a[proj], self.b[proj] = nn.Parameter(a), nn.Parameter(b)
            # the sharded factor counts on every TP rank in megatron's gradient norm (the replicated one on rank 0)
            sharded = self.a[proj] if self.row else self.b[proj]
            set_tensor_model_parallel_attributes(
                sharded, is_parallel=tp_size > 1, dim=1 if self.row else 0, stride=1
            )
            # the replicated factor whose gradient each rank holds a part of (see the module docstring)
            replicated = self.b[proj] if self.row else self.a[proj]
            replicated.sequence_parallel = sequence_parallel and tp_size > 1

    def shard_axes(self) -> dict[str, int]:
        """The TP axis of each sharded tensor (dist checkpointing)."""
        return {f"{'a' if self.row else 'b'}.{proj}": 1 if self.row else 0 for proj in self.a}

    def delta(self, x: Tensor) -> Tensor:
        from megatron.core import tensor_parallel as tpl

        if not self.row and self.sequence_parallel and self.tp > 1:
            x = tpl.gather_from_sequence_parallel_region(x, tensor_parallel_output_grad=True)
        x = x.to(next(iter(self.a.values())).dtype)  # PEFT computes the adapter in its own dtype
        x = nn.functional.dropout(x, self.dropout, self.training) if self.dropout else x
        pieces = []
        for proj, width in self.widths:
            if proj not in self.a:
                pieces.append(x.new_zeros(*x.shape[:-1], self.groups, width))
                continue
            low = x @ self.a[proj].t()
            if self.tp > 1 and self.row:
                low = (
                    tpl.reduce_scatter_to_sequence_parallel_region(low)
                    if self.sequence_parallel
                    else tpl.reduce_from_tensor_model_parallel_region(low)
                )
            elif self.tp > 1 and not self.sequence_parallel:
                low = tpl.copy_to_tensor_model_parallel_region(
                    low
                )  # backward: A's gradient summed over B's shards
            out = low @ self.b[proj].t()
            pieces.append(out.reshape(*out.shape[:-1], self.groups, width))
        return self.scaling * torch.cat(pieces, dim=-1).flatten(-2)


def _adapter_input(module: nn.Module, x: Tensor, eps: float) -> Tensor:
    """The input PEFT's adapter sees: Transformer Engine's LayerNormLinear normalises inside the layer."""
    weight = getattr(module, "layer_norm_weight", None)
    if weight is None:
        return x
    bias = getattr(module, "layer_norm_bias", None)
    if bias is not None:
        return nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def _adapter_of(module: nn.Module) -> LoraAdapter:
    """The adapter `attach_adapters` hung on a megatron linear layer as its child `lora`."""
    adapter = module.get_submodule("lora")
    if not isinstance(adapter, LoraAdapter):
        raise TypeError(f"{type(module).__name__}.lora is {type(adapter).__name__}, not a LoraAdapter")
    return adapter


def _add_delta(eps: float, module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    out, bias = output
    return out + _adapter_of(module).delta(_adapter_input(module, args[0], eps)).to(out.dtype), bias


def _sharded_state_dict(
    module: nn.Module, original: Any, prefix: str = "", sharded_offsets: Any = (), metadata: Any = None
) -> dict[str, Any]:
    """The base layer's sharded state, with the adapter's tensors sharded on their own TP axes."""
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

    state = {
        k: v
        for k, v in original(prefix, sharded_offsets, metadata).items()
        if not k.startswith(f"{prefix}lora.")
    }
    adapter = _adapter_of(module)
    return state | make_sharded_tensors_for_checkpoint(
        adapter.state_dict(prefix="", keep_vars=True),
        f"{prefix}lora.",
        adapter.shard_axes(),
        sharded_offsets,
        tp_group=ps.get_tensor_model_parallel_group(),
        dp_cp_group=(metadata or {}).get("dp_cp_group"),
    )


def attach_adapters(
    model: nn.Module,
    layers: list[int],
    spec: LoraSpec,
    layout: GPTLayout,
    *,
    tp_rank: int,
    tp_size: int,
    sequence_parallel: bool,
    eps: float,
) -> None:
    """Hang this chunk's adapters on its linear layers (`layers`: the chunk's global layer indices) and freeze
    everything else."""
    from functools import partial

    for param in model.parameters():
        param.requires_grad_(False)
    for local, index in enumerate(layers):
        for linear, pairs in spec.adapters.get(index, {}).items():
            module = model.get_submodule(f"decoder.layers.{local}.{linear}")
            module.lora = LoraAdapter(
                linear,
                pairs,
                layout,
                scaling=spec.scaling,
                dropout=spec.dropout,
                tp_rank=tp_rank,
                tp_size=tp_size,
                sequence_parallel=sequence_parallel,
            )
            module.register_forward_hook(partial(_add_delta, eps))
            # a method replaced on the instance (nn.Module types attributes as Tensor | Module, hence setattr)
            setattr(  # noqa: B010
                module, "sharded_state_dict", partial(_sharded_state_dict, module, module.sharded_state_dict)
            )


def is_adapter_key(key: str) -> bool:
    return ".lora." in key


def adapter_tensors(layer_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """One layer's adapter tensors (names relative to the layer) — what a TP gather collects."""
    return {k: v for k, v in layer_state.items() if is_adapter_key(k)}


def lora_hf_tensors(parts: list[dict[str, Tensor]], layer: int, spec: LoraSpec) -> dict[str, Tensor]:
    """One layer's adapters from every TP rank (`parts[r]`, names relative to the layer) under PEFT's names:
    column layers' B and row layers' A joined along their TP axis."""
    out = {}
    for key in parts[0]:
        linear, _, rest = key.partition(".lora.")
        factor, proj = rest.split(".", 1)
        row = linear in ROW_PARALLEL
        joined = (
            torch.cat([p[key] for p in parts], dim=1 if row else 0)
            if (factor == "a") == row
            else parts[0][key]
        )
        out[f"{spec.hf_modules[(layer, proj)]}.lora_{factor.upper()}.{ADAPTER}.weight"] = joined.clone()
    return out


def with_base_layer_names(state: Mapping[str, Tensor], spec: LoraSpec) -> dict[str, Tensor]:
    """Plain HF names -> PEFT's `<module>.base_layer.<param>` for the adapted modules (what merge_lora reads)."""
    adapted = set(spec.hf_modules.values())
    out = {}
    for name, tensor in state.items():
        module, _, param = name.rpartition(".")
        out[f"{module}.base_layer.{param}" if module in adapted else name] = tensor
    return out


def restore_adapter_dtype(chunks: list[nn.Module], spec: LoraSpec) -> None:
    """Megatron's Float16Module casts the whole chunk to 16 bits; the adapters go back to their own dtype."""
    for chunk in chunks:
        for module in chunk.modules():
            if isinstance(module, LoraAdapter):
                module.to(spec.dtype)
