"""Peak memory per rank of the training strategies: torch_train (1 process) vs fsdp2_train, ZeRO-2,
ZeRO-3 and ZeRO-3 with CPU offload (2 ranks, gloo), on a ~50M-parameter Qwen2 built locally.

    python bench/memory.py [--steps 3] [--batch 2] [--seq 64]

Every configuration runs in fresh processes. Memory is the heap in use (glibc mallinfo2: what
malloc has handed out and not taken back, where torch keeps CPU tensors; unlike the resident set it
ignores freed memory glibc keeps for reuse), sampled every 2 ms, above a baseline taken after all
imports (torch, transformers, DeepSpeed) and the process group:
  build   peak while the model is built and wrapped (every rank builds the whole fp32 model before
          the strategy shards it: ZeRO-3 without deepspeed.zero.Init, as the workers load models)
  steady  what stays after the steps: weights, gradients, optimizer state, communication buffers
  train   peak during `--steps` AdamW steps on `--batch` x `--seq` tokens per rank
Prints MiB per rank (the larger rank) and each ratio to torch_train. DeepSpeed runs ROLL's presets
(trainer/config/presets.py) with their `auto` sizes derived. On CPU, "offload" moves nothing off a
device: it shows the cost of DeepSpeed's offload buffers and CPU Adam.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.config.presets import DEEPSPEED_PRESETS

CONFIGS: dict[str, tuple[str, int, dict | None]] = {
    "torch_train": ("torch_train", 1, None),
    "fsdp2_train": ("fsdp2_train", 2, {}),
    "zero2": ("deepspeed_train", 2, DEEPSPEED_PRESETS["deepspeed_zero2"]),
    # the same with `auto` buckets (h² elements) instead of the preset's 5e8-element ones
    "zero2_auto": ("deepspeed_train", 2, {**DEEPSPEED_PRESETS["deepspeed_zero2"], "zero_optimization": {
        **DEEPSPEED_PRESETS["deepspeed_zero2"]["zero_optimization"], "reduce_bucket_size": "auto",
        "allgather_bucket_size": "auto"}}),
    "zero3": ("deepspeed_train", 2, DEEPSPEED_PRESETS["deepspeed_zero3"]),
    "zero3_offload": ("deepspeed_train", 2, DEEPSPEED_PRESETS["deepspeed_zero3_cpuoffload"]),
}
COLUMNS = ("build", "steady", "train")
MIB = 1024**2


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = MallInfo2


def heap_in_use() -> int:
    """Arena chunks in use + mmapped chunks (glibc >= 2.33)."""
    info = LIBC.mallinfo2()
    return info.uordblks + info.hblkhd


class PeakSampler:
    """Highest heap in use since the last `reset`, sampled by a background thread."""

    def __init__(self, interval_s: float = 0.002) -> None:
        self.peak, self.interval_s, self.running = heap_in_use(), interval_s, True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            self.peak = max(self.peak, heap_in_use())
            time.sleep(self.interval_s)

    def reset(self) -> None:
        self.peak = heap_in_use()

    def read(self) -> int:
        self.peak = max(self.peak, heap_in_use())
        return self.peak

    def stop(self) -> None:
        self.running = False
        self.thread.join()


def model_50m(seed: int = 0, hidden: int = 512, layers: int = 8):
    """Qwen2 with hidden 512, 8 layers, MLP 2048, 32k vocabulary (tied): about 48M parameters (`hidden` and
    `layers` smaller for a smoke run)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=32_000, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024, tie_word_embeddings=True,
    ))


def rank_main(rank: int, world: int, name: str, port: int, args: argparse.Namespace, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    if not args.smoke:
        import deepspeed  # noqa: F401  (imported by every configuration: the same baseline)

    from tests.trainer.train.tiny_qwen import token_mean_loss
    from trainer.cluster import distributed
    from trainer.config.topology import TrainShape
    from trainer.train import OptimConfig, build_strategy

    strategy_name, _, strategy_config = CONFIGS[name]
    if strategy_name != "torch_train":
        distributed.init_process_group(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port)
    gc.collect()
    baseline = heap_in_use()
    sampler = PeakSampler()

    model = model_50m(hidden=64, layers=2) if args.smoke else model_50m()
    params = sum(p.numel() for p in model.parameters())
    optim = OptimConfig(lr=1e-4, num_training_steps=args.steps, max_grad_norm=1.0)
    shape = TrainShape("actor_train", world, args.batch, 1, args.batch * world, 1)
    strategy = build_strategy(strategy_name, model, optim, rank=rank, world_size=world,
                              strategy_config=strategy_config, shape=shape)
    del model
    build = sampler.read() - baseline

    generator = torch.Generator().manual_seed(rank)
    tokens = args.batch * (args.seq - 1) * world
    gc.collect()
    sampler.reset()
    started = time.perf_counter()
    for _ in range(args.steps):
        input_ids = torch.randint(0, 32_000, (args.batch, args.seq), generator=generator)
        batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        strategy.train_step([batch], token_mean_loss(tokens))
    seconds = (time.perf_counter() - started) / args.steps
    train = sampler.read() - baseline
    sampler.stop()
    gc.collect()
    steady = heap_in_use() - baseline
    Path(out, f"{name}_rank{rank}.json").write_text(json.dumps(
        {"params": params, "build": build, "steady": steady, "train": train, "step_s": seconds}))
    if strategy_name != "torch_train":
        distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def measure(name: str, args: argparse.Namespace) -> list[dict]:
    import torch.multiprocessing as mp

    world = CONFIGS[name][1]
    with tempfile.TemporaryDirectory() as out:
        ctx = mp.get_context("spawn")
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, world, name, port, args, out)) for r in range(world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        if any(proc.exitcode for proc in procs):
            raise RuntimeError(f"{name}: a rank failed (exit codes {[p.exitcode for p in procs]})")
        return [json.loads(Path(out, f"{name}_rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2, help="sequences per rank per step")
    parser.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--smoke", action="store_true",
                        help="a 2-layer model, 1 step of 1 x 16 tokens, torch_train vs fsdp2_train (CI: seconds; "
                             "DeepSpeed's first start JIT-builds its CPU comm op, minutes)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.batch, args.seq, args.only = 1, 1, 16, ["torch_train", "fsdp2_train"]

    results = {name: measure(name, args) for name in args.only}
    params = next(iter(results.values()))[0]["params"]
    print(f"model: {params / 1e6:.1f}M parameters (fp32 weights {params * 4 / MIB:.0f} MiB); {args.batch} x "
          f"{args.seq} tokens per rank; {args.steps} AdamW steps; heap MiB above the post-import baseline, "
          f"larger rank")
    torch_ranks = results.get("torch_train")
    reference = {key: max(r[key] for r in torch_ranks) if torch_ranks else float("nan") for key in COLUMNS}
    print(f"{'strategy':<14} {'ranks':>5}" + "".join(f" {key + ' MiB':>11} {'ratio':>6}" for key in COLUMNS)
          + f" {'s/step':>7}")
    for name, ranks in results.items():
        row = f"{name:<14} {len(ranks):>5}"
        for key in COLUMNS:
            value = max(r[key] for r in ranks)
            row += f" {value / MIB:>11.0f} {value / reference[key]:>6.2f}"
        print(row + f" {max(r['step_s'] for r in ranks):>7.2f}")
    if torch_ranks:
        print("ratio train peak to torch_train: " + ", ".join(
            f"{name} {max(r['train'] for r in ranks) / reference['train']:.2f}x" for name, ranks in results.items()))


if __name__ == "__main__":
    main()
