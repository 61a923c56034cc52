"""Partial freezing (ROLL's model_args.freeze_module_prefix; docs/decisions/0042): parameters whose name starts
with one of the comma-separated prefixes keep requires_grad False, so no gradient reaches them and the
optimizer, built from the trainable parameters only (trainer.train.base.trainable_parameters), never holds or
steps them.

As ROLL (roll/models/model_providers.py `freeze_model`): a plain `name.startswith(prefix)` on the Hugging Face
model's parameter names, applied to a training role that does not train LoRA (with lora_target the base model
is frozen already and ROLL ignores the prefixes). `model.layers.1` therefore also freezes `model.layers.10`…;
`model.layers.1.` does not.
"""

from __future__ import annotations

from torch import nn


def freeze_prefixes(text: str) -> list[str]:
    """ROLL's comma-separated freeze_module_prefix as a list (blank entries dropped)."""
    return [prefix.strip() for prefix in text.split(",") if prefix.strip()]


def freeze_by_prefix(model: nn.Module, prefixes: list[str], field: str) -> list[str]:
    """Set requires_grad False on every parameter whose name starts with a prefix; returns their names. A prefix
    that matches no parameter is refused (naming it and a few of the model's parameter names)."""
    names = [name for name, _ in model.named_parameters()]
    unmatched = [prefix for prefix in prefixes if not any(name.startswith(prefix) for name in names)]
    if unmatched:
        heads = sorted({".".join(name.split(".")[:2]) if name.count(".") > 1 else name.split(".")[0] for name in names})
        raise ValueError(f"{field}: {', '.join(map(repr, unmatched))} matches no parameter of this model; its "
                         f"parameter names start with {', '.join(heads[:8])} (e.g. {names[0]}, {names[-1]})")
    frozen = []
    for name, param in model.named_parameters():
        if name.startswith(tuple(prefixes)):
            param.requires_grad_(False)
            frozen.append(name)
    return frozen
