"""Rollout throughput: the `vllm` engine vs our `hf_infer` engine, same prompts, n and lengths, one process.

    python bench/rollout.py [--sizes tiny32 m20 m100] [--lengths 16 128] [--prompts 8] [--n 4] [--repeats 2]

For each locally built model size (trainer.models.tiny.SIZES: tiny32 ~0.1M, m20 ~19M, m100 ~104M
parameters, random init, float32) and each response length, both engines sample n responses to the
same prompts (24 random tokens each) at temperature 1 with ignore_eos, so every response has exactly
`length` tokens. Timed: `repeats` generate calls after one warm-up call; engine start-up excluded.
Both run on one intra-op thread (what vLLM sets for itself in-process on CPU). Prints generated
tokens/s of each engine and the ratio vLLM / HF per cell (> 1: vLLM is faster).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

PROMPT_TOKENS = 24


def tokens_per_second(engine: object, prompts: list[list[int]], params: object, repeats: int) -> float:
    from dataclasses import replace

    engine.generate(prompts, replace(params, seed=0))  # warm-up: allocation, first-call paths
    started = time.perf_counter()
    generated = 0
    for r in range(repeats):
        gens = engine.generate(prompts, replace(params, seed=r + 1))
        generated += sum(len(g.token_ids) for g in gens)
    return generated / (time.perf_counter() - started)


def kv_cache_bytes(size: str, sequences: int, tokens: int) -> int:
    """K and V of every layer for `sequences` x `tokens` float32 positions, with 2x headroom and
    whole 128-token blocks (vLLM's CPU default block size)."""
    from trainer.models.tiny import SIZES

    shape = SIZES[size]
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    per_token = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * head_dim * 4
    blocks = -(-tokens // 128) + 1
    return 2 * sequences * blocks * 128 * per_token


def bench_size(size: str, lengths: list[int], prompts: list[list[int]], n: int, repeats: int,
               root: Path) -> list[tuple[str, float, int, float, float]]:
    import torch

    from trainer.config.schema import VllmConfig
    from trainer.models.loading import load_model
    from trainer.models.tiny import build_tiny_model
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.hf import HFInferEngine
    from trainer.rollout.vllm import VllmEngine, engine_kwargs

    path = build_tiny_model(root / size, size=size, seed=0)
    model = load_model(path, dtype="fp32")
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    hf = HFInferEngine(model, eos_token_ids=[258], pad_token_id=258)
    torch.set_num_threads(1)
    hf_rates = {}
    for length in lengths:
        params = SamplingParams(max_new_tokens=length, temperature=1.0, n=n, ignore_eos=True)
        hf_rates[length] = tokens_per_second(hf, prompts, params, repeats)
    del hf, model
    gc.collect()

    options = VllmConfig(enforce_eager=True, max_model_len=PROMPT_TOKENS + max(lengths) + 8, max_num_seqs=256,
                         kv_cache_memory_bytes=kv_cache_bytes(size, len(prompts) * n, PROMPT_TOKENS + max(lengths)))
    engine = VllmEngine(str(path), engine_kwargs(options.model_dump(), dtype="float32", seed=0, on_gpu=False,
                                                 colocated=False))
    rows = []
    for length in lengths:
        params = SamplingParams(max_new_tokens=length, temperature=1.0, n=n, ignore_eos=True)
        rows.append((size, params_m, length, hf_rates[length], tokens_per_second(engine, prompts, params, repeats)))
    engine.shutdown()
    del engine
    gc.collect()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny32", "m20", "m100"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[16, 128])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny32, 4 tokens, 2 prompts x 2, 1 repeat (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.lengths, args.prompts, args.n, args.repeats = ["tiny32"], [4], 2, 2, 1
    rng = random.Random(0)
    prompts = [[rng.randrange(0, 256) for _ in range(PROMPT_TOKENS)] for _ in range(args.prompts)]
    print(f"{args.prompts} prompts x n={args.n}, {PROMPT_TOKENS} prompt tokens, float32, 1 thread, "
          f"{args.repeats} timed calls after 1 warm-up", flush=True)
    print(f"{'model':>7} {'params':>8} {'length':>6} {'hf tok/s':>10} {'vllm tok/s':>11} {'vllm/hf':>8}", flush=True)
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-rollout-") as tmp:
        for size in args.sizes:
            for name, params_m, length, hf_rate, vllm_rate in bench_size(size, args.lengths, prompts, args.n,
                                                                          args.repeats, Path(tmp)):
                print(f"{name:>7} {params_m:>7.1f}M {length:>6} {hf_rate:>10.0f} {vllm_rate:>11.0f} "
                      f"{vllm_rate / hf_rate:>7.2f}x", flush=True)
                ratios.append(vllm_rate / hf_rate)
    print(f"ratio vllm / hf tokens/s: {min(ratios):.2f}x to {max(ratios):.2f}x over {len(ratios)} cells")


if __name__ == "__main__":
    main()
