"""Trained LoRA adapters (PEFT folders) on top of a role's base model, and a run's own adapters written as such a
folder (model_args.adapter_name_or_path; docs/decisions/0042).

A training role with lora_target continues training the adapter: its LoRA layers are injected as this config
says (trainer.models.lora), checked against the adapter (rank, alpha, the adapted modules, the modules saved
beside them: trainer.config.adapters), and given the adapter's tensors. Every other role (and a training role
without lora_target) loads the model the adapter describes, merged: W' = W + scaling · B @ A with scaling =
lora_alpha / r (alpha / sqrt(r) with use_rslora), computed by PEFT (`PeftModel.from_pretrained(...)
.merge_and_unload()`), so every adapter PEFT can load merges here as PEFT merges it.

Names. PEFT's file holds `base_model.model.<module>.lora_A.weight` / `.lora_B.weight` for an adapted linear
layer and `base_model.model.<module>.<param>` for a module of modules_to_save; the injected model names them
`<module>.lora_A.default.weight` and `<module>.modules_to_save.default.<param>` (trainer.models.lora).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from trainer.config.adapters import (
    WEIGHT_FILES,
    adapter_mismatches,
    lora_alpha,
    lora_rank,
    read_adapter_config,
)
from trainer.models import lora

if TYPE_CHECKING:
    from trainer.config.schema import ModelArgs

PREFIX = "base_model.model."  # what PeftModel puts before the wrapped model's names
ADAPTER_DIR = "lora_adapter"  # a checkpoint's adapter folder, beside hf_model/
LORA_MARKERS = (".lora_A.", ".lora_B.")


def file_name(name: str) -> str | None:
    """PEFT's file name of an injected LoRA model's tensor; None for a base weight (not part of the adapter)."""
    for marker in LORA_MARKERS:
        if f"{marker}{lora.ADAPTER}." in name:
            return PREFIX + name.replace(f"{marker}{lora.ADAPTER}.", marker)
    saved = f".modules_to_save.{lora.ADAPTER}."
    if saved in name:
        return PREFIX + name.replace(saved, ".")
    return None


def model_name(key: str, modules_to_save: list[str]) -> str | None:
    """The injected model's name of a PEFT file key; None for a key that is neither a LoRA weight nor a module
    of modules_to_save (e.g. a resized embedding saved beside the adapter)."""
    name = key.removeprefix(PREFIX)
    for marker in LORA_MARKERS:
        if marker in name and f"{marker}{lora.ADAPTER}." not in name:
            return name.replace(marker, f"{marker}{lora.ADAPTER}.", 1)
    for module in modules_to_save:
        for head in (f"{module}.", f".{module}."):
            at = name.find(head) if head.startswith(".") else (0 if name.startswith(head) else -1)
            if at >= 0:
                cut = at + len(head)
                return f"{name[:cut]}modules_to_save.{lora.ADAPTER}.{name[cut:]}"
    return None


def adapter_tensors(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """An injected LoRA model's adapter (LoRA weights and modules_to_save copies) under PEFT's file names."""
    out = {}
    for name, tensor in state.items():
        key = file_name(name)
        if key is not None:
            out[key] = tensor
    return out


def adapted_modules(names: Any) -> list[str]:
    """The modules whose lora_A weights `names` hold (PEFT file names or the injected model's)."""
    modules = {name.removeprefix(PREFIX).split(".lora_A.")[0] for name in names if ".lora_A." in name}
    return sorted(modules)


def adapter_config(args: ModelArgs, modules: list[str], base_model: str | None) -> dict[str, Any]:
    """adapter_config.json of the LoRA `args` train, with the modules it adapted named (as PEFT writes after
    resolving `all-linear`): PEFT's LoraConfig serialised, so PEFT and vLLM read it as their own."""
    from peft import LoraConfig

    config = LoraConfig(r=lora_rank(args), lora_alpha=lora_alpha(args), lora_dropout=args.lora_dropout,
                        target_modules=list(modules), modules_to_save=lora.split_names(args.additional_target),
                        base_model_name_or_path=base_model)
    out = config.to_dict()
    return {key: sorted(value) if isinstance(value, set) else value for key, value in out.items()}


def save_adapter(folder: str | Path, state: Mapping[str, Tensor], args: ModelArgs, base_model: str | None) -> Path:
    """Write an injected LoRA model's adapter (from its full state dict) as a PEFT folder: adapter_config.json
    and adapter_model.safetensors, which PeftModel.from_pretrained, vLLM and adapter_name_or_path load."""
    import json

    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {key: t.detach().to("cpu", copy=True).contiguous() for key, t in adapter_tensors(state).items()}
    config = adapter_config(args, adapted_modules(tensors), base_model)
    save_file(tensors, str(folder / WEIGHT_FILES[0]), metadata={"format": "pt"})
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return folder


def read_adapter_weights(path: str | Path) -> dict[str, Tensor]:
    folder = Path(path)
    if (folder / WEIGHT_FILES[0]).is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / WEIGHT_FILES[0]))
    return torch.load(folder / WEIGHT_FILES[1], map_location="cpu", weights_only=True)


def load_adapter(model: nn.Module, path: str | Path, args: ModelArgs, field: str) -> nn.Module:
    """Give an injected LoRA model (trainer.models.lora.add_lora with `args`) the trained adapter at `path`, to
    continue training it; refused, naming both sides, when the adapter is not the LoRA `args` train."""
    config = read_adapter_config(path, field)
    problems = adapter_mismatches(config, args, field)
    weights = read_adapter_weights(path)
    saved = list(config.get("modules_to_save") or [])
    section = field.rsplit(".", 1)[0]
    ours, theirs = lora.lora_layers(model), adapted_modules(weights)
    if sorted(ours) != theirs:
        missing, extra = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
        problems.append(f"{section}.lora_target={args.lora_target!r} adapts {len(ours)} modules, the adapter "
                        f"{len(theirs)} (target_modules {config.get('target_modules')!r})"
                        + (f"; not in the adapter: {', '.join(missing[:3])}" if missing else "")
                        + (f"; not adapted here: {', '.join(extra[:3])}" if extra else "")
                        + "; set lora_target to the adapter's modules")
    if problems:
        raise ValueError(f"{field}={str(path)!r} cannot continue training: " + "; ".join(problems))
    state = {}
    for key, tensor in weights.items():
        name = model_name(key, saved)
        if name is None:
            raise ValueError(f"{field}: {str(path)!r} holds {key!r}, neither a LoRA weight nor a module of "
                             f"modules_to_save {saved}; only those load here")
        state[name] = tensor
    expected = {n for n, _ in model.named_parameters() if ".lora_" in n or ".modules_to_save." in n}
    missing = sorted(expected - set(state))
    _, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{field}: {str(path)!r} does not fit this model's LoRA layers: missing {missing[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]}")
    return model


def merge_adapter(model: nn.Module, path: str | Path, field: str) -> nn.Module:
    """The base `model` with the adapter at `path` merged into its weights (PEFT's own load and merge), as a
    plain Hugging Face model again."""
    from peft import PeftModel

    read_adapter_config(path, field)
    try:
        wrapped = PeftModel.from_pretrained(model, str(path), is_trainable=False)
    except (ValueError, RuntimeError, KeyError) as error:  # PEFT names what did not fit
        raise ValueError(f"{field}={str(path)!r} does not fit the base model: {error}") from error
    merged = wrapped.merge_and_unload()
    for param in merged.parameters():
        param.requires_grad_(True)  # PEFT froze the base; whether the role trains is decided by its caller
    return merged
