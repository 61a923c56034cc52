"""Dynamic sampling on the demo: the share of zero-variance groups trained, prompts drawn, reward and time, with
and without it.

    python bench/dynamic_sampling.py [--config examples/demo_grpo_dynamic_sampling_cpu.yaml] [--steps 250]
                                     [--seeds 42 43 44] [--window 50] [--repeats 1] [--workers local]
                                     [--extra key=value ...]

The demo (GRPO, tiny Qwen2 from random init, the synthetic `copy` task, 16 prompts x 8 samples a step) as
examples/demo_grpo_dynamic_sampling_cpu.yaml defines it, run twice for each of `--seeds` by the trainer CLI, each
run in a fresh process, with that seed and the same number of steps: `dynamic` as the file says (a std_filter at 0 drops every group
whose 8 rewards are equal, is_use_additional_prompts replaces it, up to max_additional_running_prompts extra
prompts a step), and its peer `plain` with dynamic sampling off (no query filter,
is_use_additional_prompts false) and nothing else changed.

Per run it prints `rollout/zero_variance_group_fraction` (of the groups the actor's loss saw, those whose rewards
are all equal) averaged over the first and the last `--window` steps and over all steps; the extra prompts
drawn; the steps whose batch was topped up with filtered groups (the budget ran out; they stay out of the loss)
and those without any group to learn from (the actor did not step); the reward; the step and wall-clock times;
each as the mean over the seeds and per seed, and the ratio dynamic / plain; then the evaluation curve.

Rewards are compared at equal training steps, as DAPO's and ROLL's reports do. The training batch's
`reward/mean` is biased under dynamic sampling (solved groups are filtered out of it), so the reward compared
is `rollout/drawn_reward_mean`: the step's own 16 prompts before any replacement, what `reward/mean` is without
dynamic sampling; and the demo's evaluation (greedy, 64 held-out prompts, every eval_steps). Wall-clock starts
at the run's `running` status event; each process uses one intra-op thread (OpenMP threads spinning on a busy
2-core machine slow a tiny-model run several-fold). The runs alternate `--repeats` times and each keeps its
fastest; the metrics are seeded, so every repeat must reproduce them (checked). The machine is shared: the load
average before and after each run is printed next to it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_run import REPO, run_trainer

EXAMPLE = REPO / "examples" / "demo_grpo_dynamic_sampling_cpu.yaml"
OFF = ("~rewards.synthetic.query_filter_config", "is_use_additional_prompts=false")


def run(config: Path, name: str, steps: int, workers: str, extra: list[str], root: Path) -> dict:
    """One run of `config` through the trainer CLI, dynamic sampling on (`dynamic`) or off (`plain`)."""
    overrides = [f"max_steps={steps}", f"save_steps={steps}", "track_with=none", *(OFF if name == "plain" else ()),
                 *extra]
    run = run_trainer(config, root / name, overrides, workers=workers, name=name)
    metrics = run["metrics"]
    return {"name": name, "steps": [m for _, _, m in metrics], "wall": metrics[-1][1],
            "total": run["total"], "load": run["load"],
            "evals": {s: m["eval/reward/mean"] for s, _, m in metrics if "eval/reward/mean" in m}}


def mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


def seeded(result: dict) -> list[dict[str, float]]:
    """The run's metrics without its timings: what a repeat with the same seed must reproduce."""
    return [{k: v for k, v in m.items() if not k.startswith(("timing/", "time/"))} for m in result["steps"]]


def drawn_reward(m: dict[str, float]) -> float:
    """The reward of the step's own prompts: reward/mean without dynamic sampling (no replacement)."""
    return m.get("rollout/drawn_reward_mean", m["reward/mean"])


def summary(result: dict, window: int) -> dict[str, float]:
    steps = result["steps"]
    flat = [m["rollout/zero_variance_group_fraction"] for m in steps]
    drawn = [drawn_reward(m) for m in steps]
    evals = list(result["evals"].values())
    return {
        "flat_first": mean(flat[:window]), "flat_last": mean(flat[-window:]), "flat_all": mean(flat),
        "steps_flat": sum(f > 0 for f in flat),
        "extra": sum(m.get("rollout/extra_prompts", 0.0) for m in steps),
        "topped_up": sum(m.get("rollout/filler_group_fraction", 0.0) > 0 for m in steps),
        "no_update": sum(m["actor/final_mask_ratio"] == 0 for m in steps),
        "reward_last10": mean(drawn[-10:]), "reward_mean": mean(drawn),
        "batch_reward_last10": mean([m["reward/mean"] for m in steps[-10:]]),
        "eval_final": evals[-1] if evals else float("nan"), "eval_mean": mean(evals) if evals else float("nan"),
        "to_09": next((i + 10 for i in range(len(drawn) - 9) if mean(drawn[i:i + 10]) >= 0.9), None),
        "step_first": 1000 * statistics.median(m["timing/step"] for m in steps[:window]),
        "step_last": 1000 * statistics.median(m["timing/step"] for m in steps[-window:]),
        "wall": result["wall"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=EXAMPLE)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44], help="`seed` of each pair of runs")
    parser.add_argument("--window", type=int, default=50, help="steps averaged as 'first' and 'last'")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each (alternating); the fastest is kept")
    parser.add_argument("--workers", default="local", choices=["local", "ray"])
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for both runs, key=value")
    parser.add_argument("--smoke", action="store_true", help="4 steps, one seed (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds, args.window = 4, [42], 2

    results: dict[tuple[int, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dynamic-sampling-") as tmp:
        for seed in args.seeds:
            for repeat in range(args.repeats):
                for name in ("plain", "dynamic"):
                    r = run(args.config, name, args.steps, args.workers, [f"seed={seed}", *args.extra],
                            Path(tmp) / f"{seed}-{repeat}")
                    print(f"  seed {seed} {name:8s} run {repeat + 1}: {args.steps} steps in {r['wall']:.1f} s "
                          f"({r['total']:.1f} s with start-up), load {r['load'][0]:.2f} -> {r['load'][1]:.2f}",
                          flush=True)
                    kept = results.get((seed, name))
                    if kept is not None and seeded(r) != seeded(kept):
                        raise SystemExit(f"seed {seed} {name}: run {repeat + 1} did not reproduce run 1's metrics")
                    if kept is None or r["wall"] < kept["wall"]:
                        results[seed, name] = r
    summaries = {key: summary(r, args.window) for key, r in results.items()}
    print(f"\n{' '.join([args.config.name, *args.extra])}, {args.steps} steps, seeds "
          f"{' '.join(map(str, args.seeds))}, workers {args.workers}. Each cell: the mean over the seeds "
          f"[per seed]. 'Drawn reward': each step's own prompts before any replacement; first / last: "
          f"{args.window} steps\n")
    rows = [
        ("zero-variance groups trained, first steps", "flat_first", "{:.3f}"),
        ("zero-variance groups trained, last steps", "flat_last", "{:.3f}"),
        ("zero-variance groups trained, all steps", "flat_all", "{:.3f}"),
        ("steps that trained a zero-variance group", "steps_flat", "{:.0f}"),
        ("extra prompts drawn", "extra", "{:.0f}"),
        ("steps topped up with filtered groups (out of the loss)", "topped_up", "{:.0f}"),
        ("steps without a group to learn from (no actor update)", "no_update", "{:.0f}"),
        ("drawn reward, last 10 steps", "reward_last10", "{:.3f}"),
        ("drawn reward, mean over all steps", "reward_mean", "{:.3f}"),
        ("trained batch's reward/mean, last 10 steps", "batch_reward_last10", "{:.3f}"),
        ("eval reward, final", "eval_final", "{:.3f}"),
        ("eval reward, mean over evaluations", "eval_mean", "{:.3f}"),
        ("step where the 10-step mean drawn reward reaches 0.9", "to_09", "{:.0f}"),
        ("median step time, first steps (ms)", "step_first", "{:.0f}"),
        ("median step time, last steps (ms)", "step_last", "{:.0f}"),
        ("wall-clock of the run (s)", "wall", "{:.1f}"),
    ]
    print("| | plain | dynamic | dynamic / plain |")
    print("| --- | --- | --- | --- |")
    for label, key, fmt in rows:
        cells, means = [], []
        for name in ("plain", "dynamic"):
            values = [summaries[seed, name][key] for seed in args.seeds]
            known = [v for v in values if v is not None and v == v]
            means.append(mean(known) if len(known) == len(values) else None)
            shown = fmt.format(means[-1]) if means[-1] is not None else "-"
            per_seed = ", ".join(fmt.format(v) if v is not None else "never" for v in values)
            cells.append(shown if len(values) == 1 else f"{shown} [{per_seed}]")
        a, b = means
        ratio = f"{b / a:.2f}" if a and b is not None else "-"
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")
    plain, dynamic = (mean([summaries[seed, name]["wall"] for seed in args.seeds]) for name in ("plain", "dynamic"))
    print(f"\nratio dynamic / plain wall-clock: {dynamic / plain:.2f}x")
    print("\neval reward by step (greedy, 64 held-out prompts), mean over the seeds:\n")
    print("| step | plain | dynamic | dynamic - plain |")
    print("| --- | --- | --- | --- |")
    for step in results[args.seeds[0], "plain"]["evals"]:
        a, b = (mean([results[seed, name]["evals"][step] for seed in args.seeds]) for name in ("plain", "dynamic"))
        print(f"| {step} | {a:.3f} | {b:.3f} | {b - a:+.3f} |")


if __name__ == "__main__":
    main()
