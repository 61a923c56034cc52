"""What a trained LoRA adapter folder must hold and say before a role loads it (model_args.adapter_name_or_path;
docs/decisions/0042). Torch-free: preflight reads it before any worker starts, the roles again when they load.

A PEFT adapter folder (PEFT's `save_pretrained`, or a PolicyLab checkpoint's `lora_adapter/`) holds
`adapter_config.json` (peft_type, r, lora_alpha, target_modules, modules_to_save, …) and
`adapter_model.safetensors` (or the older `adapter_model.bin`). A training role with lora_target continues
training that adapter, so the adapter must be the LoRA this config trains: same rank, same alpha, plain LoRA
(scaling alpha / r); `adapter_mismatches` says where it is not. ROLL's defaults for unset lora_rank /
lora_alpha (8, and twice the rank) live here, once, for both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config.schema import ModelArgs

DEFAULT_RANK = 8  # ROLL's LoraArguments.lora_rank
REGEX_CHARS = ("*", "$", "|", "(")  # ROLL: a lora_target holding one of these is a regex
CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def lora_rank(args: ModelArgs) -> int:
    return args.lora_rank or DEFAULT_RANK


def lora_alpha(args: ModelArgs) -> int:
    """ROLL: lora_alpha defaults to twice the rank."""
    return args.lora_alpha or 2 * lora_rank(args)


def read_adapter_config(path: str | Path, field: str) -> dict[str, Any]:
    """The folder's adapter_config.json; ValueError naming `field` when the folder is not a LoRA adapter."""
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{field}: {str(path)!r} is not a folder (give a PEFT adapter folder holding {CONFIG_FILE})")
    config_file = folder / CONFIG_FILE
    if not config_file.is_file():
        raise ValueError(f"{field}: {str(path)!r} holds no {CONFIG_FILE}; give a PEFT adapter folder (PEFT's "
                         "save_pretrained, or a PolicyLab checkpoint's lora_adapter/)")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{field}: {config_file} is not readable JSON ({error})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else type(config).__name__
        raise ValueError(f"{field}: {str(path)!r} is a {kind} adapter; only LoRA adapters (peft_type LORA) load here")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(f"{field}: {str(path)!r} holds no adapter weights ({' or '.join(WEIGHT_FILES)})")
    return config


def adapter_scaling(config: dict[str, Any]) -> float:
    """The factor PEFT multiplies B @ A by: alpha / r, or alpha / sqrt(r) for rank-stabilised LoRA (use_rslora)."""
    rank, alpha = int(config["r"]), float(config.get("lora_alpha", 8))
    return alpha / rank ** 0.5 if config.get("use_rslora") else alpha / rank


def adapter_mismatches(config: dict[str, Any], args: ModelArgs, field: str) -> list[str]:
    """Why a training role's LoRA (args: lora_rank, lora_alpha, additional_target) cannot continue training the
    adapter `config` describes; empty when it can. The adapted modules are compared once the model is built
    (trainer.models.adapters), since lora_target may be `all` or a regex."""
    section = field.rsplit(".", 1)[0]
    out = []
    rank, alpha = lora_rank(args), lora_alpha(args)
    if int(config.get("r", 0)) != rank:
        out.append(f"the adapter has rank r={config.get('r')} but {section}.lora_rank gives {rank}"
                   f"{' (unset: ROLL default 8)' if args.lora_rank is None else ''}; set lora_rank: {config.get('r')}")
    if config.get("lora_alpha") != alpha:
        out.append(f"the adapter has lora_alpha={config.get('lora_alpha')} but {section}.lora_alpha gives {alpha}"
                   f"{' (unset: twice the rank)' if args.lora_alpha is None else ''}; set lora_alpha: "
                   f"{config.get('lora_alpha')}")
    variants = [name for name in ("use_rslora", "use_dora") if config.get(name)]
    variants += [name for name in ("rank_pattern", "alpha_pattern") if config.get(name)]
    if config.get("bias", "none") != "none":
        variants.append(f"bias={config['bias']!r}")
    if variants:
        out.append(f"the adapter uses {', '.join(variants)}; LoRA trains plain adapters here (scaling alpha / r, no "
                   "bias); leave lora_target unset to load it merged into the weights instead")
    saved = sorted(config.get("modules_to_save") or [])
    wanted = sorted(name.strip() for name in (args.additional_target or "").split(",") if name.strip())
    if saved != wanted:
        out.append(f"the adapter saves modules {saved or 'none'} beside its LoRA layers but {section}.additional_target "
                   f"is {args.additional_target!r}; set additional_target: {','.join(saved) or 'unset'}")
    return out
