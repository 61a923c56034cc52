"""LoRA adapters (PEFT) on a Hugging Face model, and the merged weights the rollout engine and the HF
export receive (docs/decisions/0033).

ROLL's switch and defaults (roll/configs/model_args.py): adapters are trained when `lora_target` is set;
`lora_rank` defaults to 8 and `lora_alpha` to twice the rank; `all` means every linear layer but the
output head (PEFT's `all-linear`); a target holding a regex character (`* $ | (`) is a regex, anything
else a comma-separated list; `additional_target` are whole modules trained and saved beside them.

The adapters are injected into the model itself (`peft.inject_adapter_in_model`): the model keeps its
class, so the strategies, the value head and `save_pretrained` see the Hugging Face model they know.
Its state dict then names `<module>.base_layer.weight`, `<module>.lora_A.default.weight` and
`<module>.lora_B.default.weight` for an adapted linear layer, `<module>.modules_to_save.default.<p>` and
`<module>.original_module.<p>` for an additional target; `merge_lora` turns that back into the plain
names with W' = W + scaling · B @ A (scaling = alpha / rank), computed in float32.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from trainer.config.adapters import (  # ROLL's, shared with preflight and validation
    REGEX_CHARS,
    lora_alpha,
    lora_rank,
)

if TYPE_CHECKING:
    from trainer.config.schema import ModelArgs

ADAPTER = "default"  # PEFT's adapter name


def lora_enabled(args: ModelArgs) -> bool:
    return args.lora_target is not None


def lora_scaling(args: ModelArgs) -> float:
    """The factor of the low-rank update: alpha / rank."""
    return lora_alpha(args) / lora_rank(args)


def target_modules(target: str) -> str | list[str]:
    """ROLL's lora_target as PEFT's target_modules: a regex as is, `all` as all-linear, else the names."""
    if any(c in target for c in REGEX_CHARS):
        return target
    names = [name.strip() for name in target.split(",") if name.strip()]
    return "all-linear" if names in (["all"], ["all-linear"]) else names


def split_names(text: str | None) -> list[str] | None:
    return [name.strip() for name in text.split(",") if name.strip()] if text else None


def add_lora(model: nn.Module, args: ModelArgs) -> nn.Module:
    """`model` with LoRA adapters on args.lora_target and everything else frozen but additional_target;
    adapters in float32 under a 16-bit model when autocast_adapter_dtype (PEFT's default)."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=lora_rank(args), lora_alpha=lora_alpha(args), lora_dropout=args.lora_dropout,
                        target_modules=target_modules(str(args.lora_target)),
                        modules_to_save=split_names(args.additional_target))
    try:
        model = inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    except ValueError as error:  # PEFT names the modules it did not find
        raise ValueError(f"model_args.lora_target={args.lora_target!r}: {error}") from error
    require_linear_adapters(model)
    if args.autocast_adapter_dtype:
        adapters_to_float32(model)
    return model


def lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    from peft.tuners.lora import LoraLayer

    return {name: module for name, module in model.named_modules() if isinstance(module, LoraLayer)}


def require_linear_adapters(model: nn.Module) -> None:
    """merge_lora adds B @ A to a Linear weight; other layer kinds (embeddings, convolutions) lay it out
    otherwise, so they are refused by name."""
    other = [name for name, layer in lora_layers(model).items() if not isinstance(layer.get_base_layer(), nn.Linear)]
    if other:
        raise ValueError(f"model_args.lora_target: LoRA adapts linear layers here; not {', '.join(other)}")


def adapters_to_float32(model: nn.Module) -> None:
    for name, param in model.named_parameters():
        if ".lora_" in name and param.dtype in (torch.float16, torch.bfloat16):
            param.data = param.data.float()


def trainable_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def merge_lora(named: Iterable[tuple[str, Tensor]], scaling: float) -> Iterator[tuple[str, Tensor]]:
    """A LoRA model's (state-dict name, tensor) pairs as the plain model's: each adapted weight merged
    (W + scaling · B @ A in float32, back in W's dtype), an additional target's trained copy under the
    module's own name, its original dropped. Streams: a layer's tensors are held only until its three
    parts have arrived, so a bucketed transfer stays bucketed."""
    pending: dict[str, dict[str, Tensor]] = {}
    for name, tensor in named:
        module, part = lora_part(name)
        if part is None:
            out = plain_name(name)
            if out is not None:
                yield out, tensor
            continue
        parts = pending.setdefault(module, {})
        parts[part] = tensor
        if len(parts) == 3:
            del pending[module]
            yield f"{module}.weight", merged_weight(parts["weight"], parts["lora_A"], parts["lora_B"], scaling)
    if pending:
        raise ValueError(f"merge_lora: incomplete LoRA layers {sorted(pending)} (each needs its base weight, "
                         "lora_A and lora_B)")


def lora_part(name: str) -> tuple[str, str | None]:
    """("<module>", "weight" | "lora_A" | "lora_B") for the three tensors of an adapted weight, else (name, None)."""
    for marker, part in ((".base_layer.weight", "weight"), (f".lora_A.{ADAPTER}.weight", "lora_A"),
                         (f".lora_B.{ADAPTER}.weight", "lora_B")):
        if name.endswith(marker):
            return name[: -len(marker)], part
    return name, None


def plain_name(name: str) -> str | None:
    """The plain model's name of a tensor that needs no merge (None: the frozen original of an additional target)."""
    if ".original_module." in name:
        return None
    return name.replace(".base_layer.", ".").replace(f".modules_to_save.{ADAPTER}.", ".")


def merged_weight(weight: Tensor, lora_a: Tensor, lora_b: Tensor, scaling: float) -> Tensor:
    delta = lora_b.to(weight.device, torch.float32) @ lora_a.to(weight.device, torch.float32)
    return (weight.float() + scaling * delta).to(weight.dtype)


def merged_state_dict(state: Mapping[str, Tensor], scaling: float) -> dict[str, Tensor]:
    return dict(merge_lora(state.items(), scaling))
