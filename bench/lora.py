"""LoRA vs full fine-tuning on the ~48M-parameter Qwen2 of bench/memory.py, torch_train on CPU: what the
optimizer holds and how long a step takes (decision 0033).

    python bench/lora.py [--steps 5] [--batch 2] [--seq 64] [--rank 8] [--target all]

Both runs build the same model (same seed) in this process, one after the other, and take `--steps` AdamW
steps (after one untimed warm-up step) on `--batch` x `--seq` random tokens, on one thread. Reported:
  trainable     parameters the optimizer steps (LoRA: the adapters; ROLL's defaults rank 8, alpha 16)
  optim MiB     AdamW's state (exp_avg, exp_avg_sq) counted tensor by tensor: exact, not sampled
  grad MiB      gradients held after a step
  s/step        median wall time of a step (forward, backward, clip, AdamW)
and each ratio LoRA / full.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory import model_50m

MIB = 1024**2


def measure(args: argparse.Namespace, lora_target: str | None) -> dict[str, float]:
    import torch

    from tests.trainer.train.tiny_qwen import token_mean_loss
    from trainer.config.schema import ModelArgs
    from trainer.models.lora import add_lora
    from trainer.train import OptimConfig, build_strategy

    model = model_50m()
    if lora_target is not None:
        model = add_lora(model, ModelArgs(lora_target=lora_target, lora_rank=args.rank))
    optim = OptimConfig(lr=1e-4, num_training_steps=args.steps + 1, max_grad_norm=1.0)
    strategy = build_strategy("torch_train", model, optim)
    generator = torch.Generator().manual_seed(0)
    times = []
    for step in range(args.steps + 1):
        input_ids = torch.randint(0, 32_000, (args.batch, args.seq), generator=generator)
        batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        started = time.perf_counter()
        strategy.train_step([batch], token_mean_loss(args.batch * (args.seq - 1)))
        if step:
            times.append(time.perf_counter() - started)
    optim_bytes = sum(t.numel() * t.element_size() for state in strategy.optimizer.state.values()
                      for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
    params = list(strategy.model.parameters())
    return {
        "params": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
        "optim": optim_bytes,
        "grad": sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None),
        "step_s": statistics.median(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=2, help="sequences per step")
    parser.add_argument("--seq", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha: twice the rank, ROLL's default)")
    parser.add_argument("--target", default="all", help="lora_target (all: every linear layer but the head)")
    parser.add_argument("--smoke", action="store_true", help="1 step of 1 x 16 tokens (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.batch, args.seq = 1, 1, 16

    import torch

    torch.set_num_threads(1)
    full = measure(args, None)
    lora = measure(args, args.target)
    print(f"model: {full['params'] / 1e6:.1f}M parameters; torch_train, fp32, 1 thread; {args.batch} x {args.seq} "
          f"tokens; median of {args.steps} AdamW steps; LoRA rank {args.rank} on {args.target}")
    print(f"{'run':<6} {'trainable':>11} {'optim MiB':>10} {'grad MiB':>9} {'s/step':>7}")
    for name, row in (("full", full), ("lora", lora)):
        print(f"{name:<6} {row['trainable']:>11,} {row['optim'] / MIB:>10.1f} {row['grad'] / MIB:>9.1f} "
              f"{row['step_s']:>7.3f}")
    print(f"{'ratio':<6} {lora['trainable'] / full['trainable']:>11.4f} {lora['optim'] / full['optim']:>10.4f} "
          f"{lora['grad'] / full['grad']:>9.4f} {lora['step_s'] / full['step_s']:>7.2f}   (LoRA / full)")


if __name__ == "__main__":
    main()
