"""`python -m trainer make-tiny-model DIR [--size tiny|small] [--seed N]` (torch imported only when run)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

SIZE_CHOICES = ("tiny", "small")  # keys of trainer.models.tiny.SIZES, kept here so --help stays torch-free


def _make_tiny_model(args: argparse.Namespace) -> int:
    from trainer.models.tiny import build_tiny_model

    out = build_tiny_model(args.dir, size=args.size, seed=args.seed)
    print(f"wrote a randomly initialised {args.size} Qwen2 model and its tokenizer to {out}", file=sys.stdout)
    return 0


def add_make_tiny_model_parser(sub: Any) -> None:
    parser = sub.add_parser("make-tiny-model", help="build a tiny random Qwen2 model + byte-level tokenizer")
    parser.add_argument("dir", help="output directory (HF format: config, safetensors, tokenizer)")
    parser.add_argument("--size", default="tiny", choices=SIZE_CHOICES, help="model size (default: tiny)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random initialisation (default: 0)")
    parser.set_defaults(handler=_make_tiny_model)
