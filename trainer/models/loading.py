"""Load any HF-format model directory (the tiny model or a real checkpoint) and its tokenizer."""

from __future__ import annotations

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


def load_model(path: str | Path, dtype: Any = None) -> Any:
    """AutoModelForCausalLM from a local HF directory (nothing is downloaded)."""
    from transformers import AutoModelForCausalLM

    torch_dtype = resolve_dtype(dtype)
    kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}
    return AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, **kwargs)


def load_tokenizer(path: str | Path, padding_side: str = "left") -> Any:
    """AutoTokenizer with `padding_side` set (it does not survive save/load) and a pad token."""
    from transformers import AutoTokenizer

    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side: {padding_side!r}; valid: left, right")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
