"""Load any HF-format model directory (the tiny model or a real checkpoint) and its tokenizer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

_DTYPES = ("float32", "bfloat16", "float16")


def resolve_dtype(dtype: Any) -> Any:
    """`None`/"auto" -> None (the checkpoint's dtype); a name or a torch.dtype -> torch.dtype."""
    import torch

    if dtype is None or dtype == "auto" or isinstance(dtype, torch.dtype):
        return None if dtype == "auto" else dtype
    names = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    name = names.get(dtype, dtype)
    if name not in _DTYPES:
        raise ValueError(f"dtype: unknown {dtype!r}; valid: auto, {', '.join(_DTYPES)}, fp32, bf16, fp16")
    return getattr(torch, name)


ATTN_ALIASES = {"fa2": "flash_attention_2"}


def load_model(
    path: str | Path,
    dtype: Any = None,
    *,
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    config_overrides: Mapping[str, Any] | None = None,
) -> Any:
    """AutoModelForCausalLM from a local HF directory (nothing is downloaded).

    `config_overrides` replace entries of the model's config.json (model_args.model_config_kwargs);
    `attn_implementation` picks the attention kernel ("fa2" is flash_attention_2). No progress bar: every
    rank of every role loads a model, and their bars only flood the run's log (Ray forwards them late)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    kwargs: dict[str, Any] = dict(config_overrides or {})
    torch_dtype = resolve_dtype(dtype)
    if torch_dtype is not None:
        kwargs["dtype"] = torch_dtype
    if attn_implementation is not None:
        kwargs["attn_implementation"] = ATTN_ALIASES.get(attn_implementation, attn_implementation)
    return AutoModelForCausalLM.from_pretrained(
        str(path), local_files_only=True, trust_remote_code=trust_remote_code, **kwargs
    )


def load_tokenizer(path: str | Path, padding_side: str = "left", *, trust_remote_code: bool = False) -> Any:
    """AutoTokenizer with `padding_side` set (it does not survive save/load) and a pad token."""
    from transformers import AutoTokenizer

    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side: {padding_side!r}; valid: left, right")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
