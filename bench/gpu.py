"""PolicyLab on a GPU against plain PyTorch / Hugging Face on the same card, in one run.

    python bench/gpu.py                              # every section on cuda:0 (~4 min on an H100)
    python bench/gpu.py --budget-s 200               # rows that no longer fit are printed as skipped
    python bench/gpu.py --sections update,generate   # some of: update, generate, sync, demo
    python bench/gpu.py --smoke                      # tiny shapes on the CPU: checks the script, not speed

Sections (each row: PolicyLab's figure, the peer's, their ratio, peak memory of the phase):
  update    actor-update tokens/s and MFU, 4 micro-batches of 4 x 2048 tokens, Qwen2.5-0.5B and -1.5B
            shapes (random weights), every training strategy importable here, against plain PyTorch:
            fp32 master weights, bf16 autocast, fused AdamW, the same token-NLL loss. MFU counts
            6·(N_non-embedding + V·h) + 12·L·h·s FLOPs a token against the card's dense bf16 peak.
  generate  hf_infer against `model.generate` (sampling at temperature 1, no top-k/top-p, every
            response run to its full length), 64 prompts x 32 and x 256 new tokens, 0.5B in bf16.
  sync      trainer -> rollout-engine weight sync in one process, 0.5B and 1.5B: the bucketed
            device-to-device path against the full CPU state dict (what Ray's object store carries).
  demo      `python -m trainer run examples/demo_grpo_cpu.yaml --workers local` per training strategy:
            wall time, first and final greedy eval accuracy (the demo learns a copy task).
Writes the same rows as JSON to $OUT/bench_gpu.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

SHAPES = {  # Qwen2.5 configs (random weights; no download)
    "0.5B": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "1.5B": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
}
SMOKE_SHAPES = {"tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
                         "tie_word_embeddings": True}}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H20": 148.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}
STRATEGIES = ("torch_train", "fsdp2_train", "deepspeed_train", "megatron_train")
ROWS: list[dict[str, Any]] = []
DEADLINE = [float("inf")]  # time.monotonic() by which the benchmark must have printed its rows (--budget-s)


def time_left() -> float:
    return DEADLINE[0] - time.monotonic()


# -- helpers ------------------------------------------------------------------------------------

def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"


def peak_tflops(name: str) -> float | None:
    return next((value for key, value in PEAK_BF16_TFLOPS.items() if key in name), None)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def build_model(shape: dict[str, Any], device: torch.device, dtype: torch.dtype = torch.float32) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**shape, max_position_embeddings=4096, use_cache=False)
    with torch.device(device):  # initialised where it will run: building 1.5B on the CPU takes long
        model = Qwen2ForCausalLM(config)
    return model.to(dtype)


def flops_per_token(shape: dict[str, Any], seq: int) -> float:
    """6·(N_non-embedding + V·h) + 12·L·h·s: matmul FLOPs of forward + backward a token (PaLM, app. B)."""
    h, layers, inter = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"]
    kv = h // shape["num_attention_heads"] * shape["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * inter  # q, o; k, v; gate, up, down
    return 6 * (layers * per_layer + shape["vocab_size"] * h) + 12 * layers * h * seq


def record(section: str, **row: Any) -> None:
    ROWS.append({"section": section, **row})
    cells = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
    print(f"  [{section}] {cells}", flush=True)


def guarded(section: str, label: str, fn: Callable[[], None], needs_s: float = 10.0) -> None:
    """One row's work; a failure is a row saying why, not the end of the benchmark. Skipped (and
    said so) when less than `needs_s` of the budget is left."""
    if time_left() < needs_s:
        record(section, case=label, skipped=f"budget: {max(0.0, time_left()):.0f} s left")
        return
    try:
        fn()
    except Exception as error:
        traceback.print_exc()
        record(section, case=label, error=f"{type(error).__name__}: {error}"[:300])


# -- update ---------------------------------------------------------------------------------------

def token_nll(tokens: int) -> Callable[[nn.Module, dict[str, Tensor]], tuple[Tensor, dict[str, float]]]:
    """Σ next-token NLL / tokens, from fp32 logits (what the actor loss computes per token)."""
    from trainer.models.batch import token_logprobs

    def loss_fn(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
        nll = -token_logprobs(logits[:, :-1].float(), batch["input_ids"][:, 1:])
        return nll.sum() / tokens, {}

    return loss_fn


def micro_batches(count: int, rows: int, seq: int, vocab: int) -> list[dict[str, Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(0, vocab, (rows, seq), generator=generator),
             "attention_mask": torch.ones(rows, seq, dtype=torch.long),
             "position_ids": torch.arange(seq).expand(rows, seq).contiguous()} for _ in range(count)]


def plain_pytorch_step(model: nn.Module, device: torch.device) -> Callable[[list[dict[str, Tensor]], Any], float]:
    """The peer: what a careful user writes by hand (fp32 master, bf16 autocast, fused AdamW)."""
    model.to(device).train()
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, **fused)

    def step(batches: list[dict[str, Tensor]], loss_fn: Any) -> float:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for batch in batches:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss, _ = loss_fn(model, {k: v.to(device, non_blocking=True) for k, v in batch.items()})
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return total

    return step


def strategy_step(name: str, model: nn.Module, device: torch.device, rows: int,
                  count: int) -> Callable[[list[dict[str, Tensor]], Any], float]:
    from trainer.config.topology import TrainShape
    from trainer.train import OptimConfig, build_strategy

    optim = OptimConfig(lr=1e-6, num_training_steps=100, max_grad_norm=1.0)
    options = {
        "torch_train": {"param_dtype": "bf16"},
        "fsdp2_train": {"param_dtype": "bf16", "reduce_dtype": "fp32"},
        "deepspeed_train": {"bf16": {"enabled": True}, "zero_optimization": {"stage": 1}},
        "megatron_train": {},
    }[name]
    if name in ("deepspeed_train", "megatron_train") and device.type == "cuda":
        model = model.to(torch.bfloat16)  # their bf16 modes keep fp32 master weights in the optimizer
    shape = TrainShape(role="actor_train", dp=1, micro_batch=rows, grad_accum=count, samples=rows * count,
                       ppo_epochs=1)
    strategy = build_strategy(name, model, optim, device=str(device), strategy_config=options, shape=shape)
    return lambda batches, loss_fn: strategy.train_step(batches, loss_fn)["loss"]


def bench_update(device: torch.device, shapes: dict[str, dict[str, Any]], rows: int, seq: int, count: int,
                 steps: int, strategies: list[str]) -> None:
    peak = peak_tflops(device_name(device))
    for shape_name, shape in shapes.items():
        batches = micro_batches(count, rows, seq, shape["vocab_size"])
        plain: dict[str, float] = {}  # the peer's tokens/s, once measured
        for case in ("plain_pytorch", *strategies):
            guarded("update", f"{shape_name}/{case}",
                    partial(time_update, device, shape_name, shape, case, batches, steps, peak, plain), needs_s=15.0)
            reset_peak(device)


def time_update(device: torch.device, shape_name: str, shape: dict[str, Any], case: str,
                batches: list[dict[str, Tensor]], steps: int, peak: float | None, plain: dict[str, float]) -> None:
    """One row: `steps` timed optimizer steps of `case` after one warm-up step."""
    rows, seq = batches[0]["input_ids"].shape
    loss_fn = token_nll(rows * seq)
    reset_peak(device)
    model = build_model(shape, device)
    step = (plain_pytorch_step(model, device) if case == "plain_pytorch"
            else strategy_step(case, model, device, rows, len(batches)))
    step(batches, loss_fn)  # warm-up: allocator, kernels, optimizer state
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        step(batches, loss_fn)
    synchronize(device)
    tps = steps * rows * seq * len(batches) / (time.perf_counter() - started)
    if case == "plain_pytorch":
        plain["tokens_per_s"] = tps
    mfu = tps * flops_per_token(shape, seq) / (peak * 1e12) if peak else "n/a"
    record("update", shape=shape_name, case=case, tokens_per_s=tps, mfu=mfu,
           ratio_vs_plain=tps / plain["tokens_per_s"] if plain else "n/a", peak_gib=peak_gib(device) or "n/a")


# -- generate -------------------------------------------------------------------------------------

def bench_generate(device: torch.device, shape: dict[str, Any], prompts: int, lengths: list[int]) -> None:
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.hf import HFInferEngine

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(shape, device, dtype).eval()
    model.config.use_cache = True
    generator = torch.Generator().manual_seed(1)
    prompt_ids = [torch.randint(1, shape["vocab_size"], (int(n),), generator=generator).tolist()
                  for n in torch.randint(16, 64, (prompts,), generator=generator)]
    engine = HFInferEngine(model, eos_token_ids=[0], pad_token_id=0, device=str(device))

    def hf_generate(new_tokens: int) -> None:
        from trainer.data.collate import left_pad

        padded = left_pad(prompt_ids, 0)
        with torch.no_grad():
            model.generate(input_ids=padded["input_ids"].to(device), attention_mask=padded["attention_mask"].to(device),
                           do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, pad_token_id=0)

    def ours(new_tokens: int) -> None:
        engine.generate(prompt_ids, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True, seed=0))

    def compare(new_tokens: int) -> None:
        timings = {}
        for label, fn in (("hf_generate", hf_generate), ("hf_infer", ours)):
            reset_peak(device)
            synchronize(device)
            started = time.perf_counter()
            fn(new_tokens)
            synchronize(device)
            timings[label] = (prompts * new_tokens / (time.perf_counter() - started), peak_gib(device))
        record("generate", case=f"{prompts}x{new_tokens}", hf_infer_tokens_per_s=timings["hf_infer"][0],
               hf_generate_tokens_per_s=timings["hf_generate"][0],
               ratio=timings["hf_infer"][0] / timings["hf_generate"][0],
               peak_gib=timings["hf_infer"][1] or "n/a")

    for fn in (hf_generate, ours):
        fn(4)  # warm-up
    for new_tokens in lengths:
        guarded("generate", f"{prompts}x{new_tokens}", lambda n=new_tokens: compare(n), needs_s=new_tokens / 4)


# -- sync -----------------------------------------------------------------------------------------

def bench_sync(device: torch.device, shapes: dict[str, dict[str, Any]], strategies: list[str]) -> None:
    for shape_name, shape in shapes.items():
        for name in [s for s in strategies if s in ("torch_train", "fsdp2_train")]:
            guarded("sync", f"{shape_name}/{name}", partial(time_sync, device, shape_name, shape, name), needs_s=15.0)
            reset_peak(device)


def time_sync(device: torch.device, shape_name: str, shape: dict[str, Any], name: str) -> None:
    """One row: the full CPU state dict into the engine, then the in-process buckets twice (the
    second is the steady figure: the first pays for the allocator's first buckets)."""
    from trainer.pipeline.rlvr import WEIGHT_BUCKET_BYTES
    from trainer.rollout.hf import HFInferEngine
    from trainer.train import OptimConfig, build_strategy

    engine_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    options = {"param_dtype": "bf16"} if device.type == "cuda" else {}
    strategy = build_strategy(name, build_model(shape, device), OptimConfig(), device=str(device),
                              strategy_config=options)
    engine = HFInferEngine(build_model(shape, device, engine_dtype), eos_token_ids=[0], pad_token_id=0,
                           device=str(device))
    seconds: dict[str, float] = {}
    peaks: dict[str, float | None] = {}
    for label in ("cpu_state_dict", "device_buckets", "device_buckets_again"):
        reset_peak(device)
        synchronize(device)
        started = time.perf_counter()
        if label == "cpu_state_dict":
            engine.load_weights(strategy.full_state_dict())
        else:
            for bucket in strategy.full_weights(device=device, dtype=engine_dtype, bucket_bytes=WEIGHT_BUCKET_BYTES):
                engine.load_weights(bucket)
        synchronize(device)
        seconds[label] = time.perf_counter() - started
        peaks[label] = peak_gib(device)
    record("sync", shape=shape_name, case=name, device_buckets_s=seconds["device_buckets_again"],
           cpu_state_dict_s=seconds["cpu_state_dict"],
           speedup=seconds["cpu_state_dict"] / seconds["device_buckets_again"],
           peak_gib=peaks["device_buckets_again"] or "n/a")


# -- demo -----------------------------------------------------------------------------------------

def bench_demo(strategies: list[str], steps: int, timeout_s: float) -> None:
    for name in strategies:
        timeout = min(timeout_s, time_left() - 5)
        if timeout < 20:
            record("demo", case=name, skipped=f"budget: {max(0.0, time_left()):.0f} s left")
            continue
        with tempfile.TemporaryDirectory(prefix=f"policylab-gpu-demo-{name}-") as out:
            command = [sys.executable, "-m", "trainer", "run", str(ROOT / "examples" / "demo_grpo_cpu.yaml"),
                       "--workers", "local", f"max_steps={steps}", f"output_dir={out}", "track_with=none",
                       f"actor_train.strategy_args.strategy_name={name}", f"eval_steps={max(1, steps // 3)}"]
            started = time.perf_counter()
            try:
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                record("demo", case=name, error=f"timed out after {timeout:.0f} s")
                continue
            wall = time.perf_counter() - started
            evals = [e["data"]["values"]["eval/accuracy"] for e in read_events(Path(out))
                     if e["type"] == "metrics" and "eval/accuracy" in e["data"]["values"]]
            if done.returncode != 0 or not evals:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                record("demo", case=name, error=f"exit {done.returncode}: {' | '.join(tail)}"[:300])
                continue
            record("demo", case=name, steps=steps, wall_s=wall, first_eval=evals[0], final_eval=evals[-1])


def read_events(out: Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n") if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


# -- main -----------------------------------------------------------------------------------------

def available_strategies(device: torch.device) -> list[str]:
    found = ["torch_train", "fsdp2_train"]
    try:
        import deepspeed  # noqa: F401

        found.append("deepspeed_train")
    except Exception as error:
        print(f"deepspeed_train skipped: {type(error).__name__}: {error}")
    if device.type == "cuda":
        try:
            import megatron.core  # noqa: F401

            found.append("megatron_train")
        except Exception as error:
            print(f"megatron_train skipped: {type(error).__name__}: {error}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="update,generate,sync,demo")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (checks the script only)")
    parser.add_argument("--update-steps", type=int, default=3)
    parser.add_argument("--demo-steps", type=int, default=40)
    parser.add_argument("--demo-timeout", type=float, default=90.0)
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="stop starting new rows this many seconds after the start (each row says it was skipped)")
    args = parser.parse_args()
    DEADLINE[0] = time.monotonic() + args.budget_s
    sections = set(args.sections.split(","))
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda:0")
    if device.type == "cpu" and not args.smoke:
        print("no CUDA device: running the --smoke shapes on the CPU (the numbers say nothing about a GPU)")
    smoke = device.type == "cpu"
    shapes = SMOKE_SHAPES if smoke else SHAPES
    strategies = available_strategies(device)
    print(f"device: {device_name(device)}; torch {torch.__version__}; strategies: {', '.join(strategies)}")

    from trainer.cluster import distributed

    distributed.init_process_group(rank=0, world_size=1, master_addr="127.0.0.1",
                                   master_port=distributed.find_free_port())
    try:
        if "update" in sections:
            rows, seq, count = (2, 32, 2) if smoke else (4, 2048, 4)
            bench_update(device, shapes, rows, seq, count, 1 if smoke else args.update_steps, strategies)
        if "generate" in sections:
            first = next(iter(shapes.values()))
            bench_generate(device, first, 8 if smoke else 64, [4, 8] if smoke else [32, 256])
        if "sync" in sections:
            bench_sync(device, shapes, strategies)
    finally:
        distributed.destroy_process_group()
    if "demo" in sections:
        bench_demo(strategies, 2 if smoke else args.demo_steps, args.demo_timeout)

    if os.environ.get("OUT"):
        target = Path(os.environ["OUT"]) / "bench_gpu.json"
        target.write_text(json.dumps({"device": device_name(device), "rows": ROWS}, indent=1))
        print(f"rows written to {target}")
    return 1 if any("error" in row for row in ROWS) else 0


if __name__ == "__main__":
    sys.exit(main())
