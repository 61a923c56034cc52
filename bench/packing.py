"""Training tokens/s and peak memory of one PPO update: padded fixed-row micro-batches vs ROLL's
token-budget micro-batches vs sequence packing, on a batch whose responses spread over 8-512 tokens.

    python bench/packing.py [--size 50m|tiny] [--rows 16] [--micro 4] [--steps 2] [--threads 2]

The ~48M-parameter Qwen2 of bench/memory.py (or the tiny test model), `--rows` samples with prompts of
16-48 and responses of 8-512 tokens (seeded, uniform), one mini-batch per optimizer step
(trainer.train.ppo_update over torch_train, AdamW, no activation recomputation), the loss a token-mean
NLL over the response tokens through the same forward helpers the actor uses. Modes:
  padded          `--micro` rows per micro-batch, padded to the batch's longest prompt + response
  token_budget    ROLL's use_dynamic_batching_in_train: rows sorted by length, micro-batches of at most
                  micro × (P + R) tokens (rows × padded length, rounded to 8), padding columns dropped
  packed          use_sequence_packing, algorithm none: each `--micro`-row micro-batch as one sequence,
                  attention per sample (trainer.models.packed_attention, what a packing role loads)
  packed_balanced use_sequence_packing, algorithm load_balance: sequences of at most micro × (P + R) / 2 tokens
  packed_mask     `packed` through transformers' sdpa with its dense block-diagonal mask (before
                  packed_attention: T² attention over the whole packed sequence)
Every mode runs the actor loss's forward (batch.response_logits_and_logprobs): packed micro-batches take
the LM head and log-softmax at their real response tokens only.
Each mode runs in a fresh process (one warm-up step, then `--steps` timed ones); `--repeats K` runs the
modes round-robin K times and keeps each mode's fastest run (a machine whose load changes meanwhile then
hurts every mode alike). Tokens/s counts real
(prompt + response) tokens; memory is the heap in use above the post-import baseline (bench/memory.py's
sampler). Prints each mode's tokens/s, peak MiB, the loss of the first step (the modes must agree) and
the ratios to `padded`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("padded", "token_budget", "packed", "packed_balanced", "packed_mask")
MIB = 1024**2


def make_batch(rows: int, seed: int, vocab: int) -> dict:
    import torch

    from trainer.models.batch import build_batch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, vocab, (int(n),), generator=g).tolist()
               for n in torch.randint(16, 49, (rows,), generator=g)]
    responses = [torch.randint(10, vocab, (int(n),), generator=g).tolist()
                 for n in torch.randint(8, 513, (rows,), generator=g)]
    return build_batch(prompts, responses, pad_token_id=0)


def spec_for(mode: str, micro: int, width: int):
    from trainer.models.micro_batches import MicroBatching

    budget = micro * width
    return {
        "padded": None,
        "token_budget": MicroBatching(rows=micro, max_tokens=budget, round_to=8, field="max_tokens_per_microbatch_in_train"),
        "packed": MicroBatching(rows=micro, pack=True),
        "packed_balanced": MicroBatching(rows=micro, pack=True, balance=True, max_packed_length=budget // 2,
                                         field="max_packed_sequence_length_train"),
        "packed_mask": MicroBatching(rows=micro, pack=True),
    }[mode]


def nll_loss(model, mb, *, norm):
    """Σ response-token NLL / the mini-batch's real tokens (ppo_update passes the normalisers as `norm`)."""
    from trainer.models.batch import response_logits_and_logprobs

    _, logp = response_logits_and_logprobs(model, mb, 1.0)  # the actor loss's forward (roles.actor)
    return -(logp * mb["response_mask"]).sum() / norm.tokens, {}


def result_of(proc: mp.process.BaseProcess, queue: mp.Queue, mode: str) -> dict:
    """The child's result; SystemExit naming the mode when the child dies without one (no endless wait)."""
    import queue as queues

    while True:
        try:
            result = queue.get(timeout=1.0)
            break
        except queues.Empty:
            if not proc.is_alive():
                raise SystemExit(f"mode {mode}: the child process exited {proc.exitcode} without a result "
                                 "(its traceback is above)") from None
    proc.join()
    return result


def run_mode(mode: str, args: argparse.Namespace, out: mp.Queue) -> None:
    import torch
    from memory import PeakSampler, heap_in_use, model_50m

    from trainer.config.topology import TrainShape
    from trainer.train import OptimConfig, build_strategy
    from trainer.train.ppo_update import ppo_update

    torch.set_num_threads(args.threads)
    if args.size == "tiny":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from trainer.config.tiny_shapes import SIZES

        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=1000, **{**SIZES["tiny"], "max_position_embeddings": 1024}))
    else:
        model = model_50m()
    model.set_attn_implementation("sdpa")
    if mode in ("packed", "packed_balanced"):
        from trainer.models.packed_attention import packing_attention

        model.set_attn_implementation(packing_attention("sdpa"))
    batch = make_batch(args.rows, args.seed, model.config.vocab_size)
    width = batch["input_ids"].size(1)
    real = int(batch["attention_mask"].sum())
    shape = TrainShape(role="actor_train", dp=1, micro_batch=args.micro, grad_accum=args.rows // args.micro,
                       samples=args.rows, ppo_epochs=1)
    strategy = build_strategy("torch_train", model, OptimConfig(lr=1e-6, max_grad_norm=None))
    spec = spec_for(mode, args.micro, width)
    first = ppo_update(strategy, batch, shape, nll_loss, seed=0, step=0, micro_batching=spec)  # warm-up
    baseline = heap_in_use()
    sampler = PeakSampler()
    start = time.perf_counter()
    for step in range(args.steps):
        ppo_update(strategy, batch, shape, nll_loss, seed=0, step=step + 1, micro_batching=spec)
    seconds = time.perf_counter() - start
    peak = sampler.read() - baseline
    sampler.stop()
    out.put({"mode": mode, "tokens_s": real * args.steps / seconds, "s_step": seconds / args.steps,
             "peak_mib": peak / MIB, "loss": first["loss"], "real": real, "padded": args.rows * width,
             "params": sum(p.numel() for p in model.parameters())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("50m", "tiny"), default="50m")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=MODES, default=list(MODES))
    parser.add_argument("--smoke", action="store_true",
                        help="the tiny model, 4 rows, 1 step, 1 thread, padded vs token_budget vs packed_balanced (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.size, args.rows, args.micro, args.steps, args.threads = "tiny", 4, 2, 1, 1
        args.only = ["padded", "token_budget", "packed_balanced"]  # the three kinds of micro-batch
    ctx = mp.get_context("spawn")
    results: dict[str, dict] = {}
    for _ in range(args.repeats):
        for mode in args.only:
            queue = ctx.Queue()
            proc = ctx.Process(target=run_mode, args=(mode, args, queue))
            proc.start()
            result = result_of(proc, queue, mode)
            if mode not in results or result["tokens_s"] > results[mode]["tokens_s"]:
                results[mode] = result
    info = next(iter(results.values()))
    print(f"model: {info['params'] / 1e6:.1f}M parameters; {args.rows} samples, {info['real']} real tokens "
          f"({info['padded']} padded: {info['real'] / info['padded']:.0%} real); micro {args.micro}; "
          f"{args.steps} timed steps on {args.threads} threads, best of {args.repeats}")
    base = results.get("padded")
    print(f"{'mode':<16} {'tokens/s':>9} {'ratio':>6} {'s/step':>7} {'peak MiB':>9} {'ratio':>6} {'loss':>12}")
    for mode, r in results.items():
        tok_ratio = r["tokens_s"] / base["tokens_s"] if base else float("nan")
        mem_ratio = r["peak_mib"] / base["peak_mib"] if base else float("nan")
        print(f"{mode:<16} {r['tokens_s']:>9.0f} {tok_ratio:>6.2f} {r['s_step']:>7.2f} {r['peak_mib']:>9.0f} "
              f"{mem_ratio:>6.2f} {r['loss']:>12.6f}")
    if base:
        print("ratio tokens/s to padded: " + ", ".join(f"{mode} {r['tokens_s'] / base['tokens_s']:.2f}x"
                                                      for mode, r in results.items() if mode != "padded"))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
