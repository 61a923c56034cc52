"""GRPO throughput: PolicyLab vs TRL's GRPOTrainer, same model, task, batch and steps, one process.

    python bench/grpo_vs_trl.py [--steps 30] [--prompts 8] [--samples 4] [--tokens 8]
    python bench/grpo_vs_trl.py --size m20 --tokens 64 --engine vllm --steps 10   # ~19M params, vLLM rollouts

Both start from the same freshly built Qwen2 model (random init, `--size` of trainer/models/tiny.py; vLLM
needs head_dim >= 32: tiny32, m20, m100) on the synthetic `copy`
task, with rollout batch = prompts x samples completions of at most `tokens` new tokens, one
optimizer step per batch, lr 2e-3, no KL (beta 0), temperature 1, token-level loss. Timed: the
training loop only (model build and trainer set-up excluded for both). Prints samples/s of each,
the ratio PolicyLab / TRL, and the mean reward of the last 10 steps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASK, TASK_KWARGS, LR = "copy", {"length": 2, "alphabet": "abcd"}, 2e-3


def run_policylab(model_dir: Path, out: Path, args: argparse.Namespace) -> tuple[float, float]:
    from trainer.config import load_config
    from trainer.pipeline.runner import RunIdentity, run_training

    cfg = load_config({
        "exp_name": "bench_policylab", "seed": 0, "output_dir": str(out), "track_with": "none",
        "pretrain": str(model_dir), "max_steps": args.steps, "save_steps": 10**6, "eval_steps": 0,
        "rollout_batch_size": args.prompts, "num_return_sequences_in_group": args.samples,
        "prompt_length": 32, "response_length": args.tokens, "adv_estimator": "grpo",
        "loss_agg_mode": "token-mean", "init_kl_coef": 0.0,
        "actor_train": {
            # as TRL's default: no activation recomputation (ROLL's default recomputes)
            "model_args": {"model_name_or_path": str(model_dir), "disable_gradient_checkpointing": True},
            "training_args": {"learning_rate": LR, "per_device_train_batch_size": args.prompts * args.samples,
                              "gradient_accumulation_steps": 1, "max_grad_norm": 1.0},
            "data_args": {"template": "none",
                          "synthetic": {"task": TASK, "num_prompts": 4096, "seed": 0, "kwargs": TASK_KWARGS}},
            "strategy_args": {"strategy_name": "torch_train"}, "infer_batch_size": 256,
        },
        "actor_infer": {
            "model_args": {"model_name_or_path": str(model_dir)},
            "generating_args": {"max_new_tokens": args.tokens, "temperature": 1.0},
            "strategy_args": {"strategy_name": args.engine}, "infer_batch_size": 256,
        },
        "rewards": {"synthetic": {"reward_type": "synthetic"}},
    })
    assert run_training(cfg, RunIdentity("bench"), backend="local", log=lambda line: None) == 0
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    running = [e for e in events if e["type"] == "status" and e["data"]["state"] == "running"]
    loop_s = running[-1]["time"] - running[0]["time"]  # from "running" at step 0 to the last step's status
    rewards = [e["data"]["values"]["reward/mean"] for e in events if e["type"] == "metrics"]
    return loop_s, sum(rewards[-10:]) / len(rewards[-10:])


def run_trl(model_dir: Path, out: Path, args: argparse.Namespace) -> tuple[float, float]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.data.synthetic import get_task
    from trainer.models.loading import load_model, load_tokenizer

    task = get_task(TASK)
    rows = task.make_prompts(4096, seed=0, **TASK_KWARGS)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])

    def reward(prompts: list[str], completions: list[str], answer: list[str], **_: object) -> list[float]:
        return [task.score(c, a) for c, a in zip(completions, answer, strict=True)]

    class LoopTimer(TrainerCallback):
        def on_train_begin(self, *a: object, **k: object) -> None:
            self.start = time.perf_counter()

        def on_train_end(self, *a: object, **k: object) -> None:
            self.seconds = time.perf_counter() - self.start

    config = GRPOConfig(
        output_dir=str(out), max_steps=args.steps, learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=0, use_cpu=True, bf16=False,
        per_device_train_batch_size=args.prompts * args.samples, gradient_accumulation_steps=1,
        num_generations=args.samples, max_completion_length=args.tokens, temperature=1.0, top_p=1.0,
        top_k=0, beta=0.0, num_iterations=1, loss_type="dapo", scale_rewards="group",
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    timer, rewards = LoopTimer(), []

    class RewardLog(TrainerCallback):
        def on_log(self, _args: object, _state: object, _control: object, logs: dict | None = None,
                   **k: object) -> None:
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    tokenizer = load_tokenizer(model_dir)
    trainer = GRPOTrainer(model=load_model(model_dir), reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[timer, RewardLog()])
    trainer.remove_callback(PrinterCallback)  # per-step dicts on stdout
    trainer.train()
    return timer.seconds, sum(rewards[-10:]) / max(1, len(rewards[-10:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--size", default="tiny", help="model size preset (trainer/models/tiny.py SIZES)")
    parser.add_argument("--engine", default="hf_infer", choices=("hf_infer", "vllm"),
                        help="PolicyLab's rollout engine; TRL generates with transformers (its vLLM modes need a "
                             "CUDA server or colocated GPU engine)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each, alternating; the median loop time is reported (shared machines are noisy)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads for both (tiny matrices gain nothing from more, and spinning "
                             "OpenMP threads make timings erratic on a busy machine)")
    parser.add_argument("--smoke", action="store_true", help="2 steps of 2 x 2 samples, one run each (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.prompts, args.samples, args.tokens, args.repeats = 2, 2, 2, 4, 1
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    from trainer.models.tiny import build_tiny_model

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="grpo_bench_") as tmp:
        root = Path(tmp)
        model_dir = build_tiny_model(root / "model", size=args.size, seed=0)
        samples = args.steps * args.prompts * args.samples
        with_trl = importlib.util.find_spec("trl") is not None
        ours, peer = [], []
        for i in range(args.repeats):
            ours.append(run_policylab(model_dir, root / f"policylab{i}", args))
            if with_trl:
                peer.append(run_trl(model_dir, root / f"trl{i}", args))
    ours_s = statistics.median(t for t, _ in ours)
    print(f"model {args.size}, PolicyLab engine {args.engine}; batch: {args.prompts} prompts x {args.samples} samples "
          f"x <= {args.tokens} tokens, {args.steps} steps, "
          f"median of {args.repeats} runs each")
    print(f"PolicyLab: {samples / ours_s:8.1f} samples/s  ({ours_s:.2f} s)  mean reward (last 10 steps) {ours[-1][1]:.3f}")
    if not with_trl:
        print("peer skipped: TRL (not installed here; pip install -r bench/requirements.txt)")
        return
    trl_s = statistics.median(t for t, _ in peer)
    print(f"TRL      : {samples / trl_s:8.1f} samples/s  ({trl_s:.2f} s)  mean reward (last 10 steps) {peer[-1][1]:.3f}")
    print(f"ratio PolicyLab / TRL: {trl_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
