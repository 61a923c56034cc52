"""Asynchronous rollout on the demo task: sync vs one_step_off vs async, steps/s and reward vs wall-clock.

    python bench/async.py [--config examples/demo_grpo_cpu.yaml] [--steps 250] [--modes sync one_step_off async]
                          [--ratio 2] [--log-probs engine] [--workers ray] [--target 0.8] [--repeats 1]
                          [--extra key=value ...]

The demo (examples/demo_grpo_cpu.yaml: GRPO, tiny Qwen2 from random init, the synthetic `copy` task;
examples/demo_grpo_vllm_cpu.yaml is the same with the vllm engine) run by the trainer CLI in a fresh
process per mode, with actor_infer moved to its own device
(`actor_infer.device_mapping=[1]`): on this 2-core machine actor_train and actor_infer are two Ray
actors of one CPU each, one intra-op thread each (Ray sets OMP_NUM_THREADS from the actor's CPUs; the
role's system_envs pin it here too), so generation and training can run at the same time. The
driver process (the loop, rewards, the producer thread) shares the same two cores. Evaluation is off.

--log-probs, the same for every mode: `engine` (default) takes the PPO ratio's old log-probs from the
rollout engine (use_rollout_log_probs=true, off_policy_correction=none): in sync mode they are the
recompute's to float rounding (the same model code at the same weights; the demo's rollout/logprob_diff_max
stays under 6e-6 over 150 steps), in the overlapped modes the ratio is taken against the behaviour policy itself and clipped as PPO does, so
actor_train runs no extra forward. `recompute` is verl's and ROLL's default: actor_train recomputes them,
and stale batches are corrected by the truncated importance ratio (off_policy_correction=tis).

Wall-clock starts at the run's `running` status event (after Ray, the workers and the model are up,
the same for every mode). Per mode it prints steps/s, the final reward (mean of the last 20 steps'
`reward/mean`), and the time at which the 10-step moving average of `reward/mean` first reaches the
target (default: 0.9 x the lowest final reward of the modes, so every mode reaches it); the speedup
at equal reward is sync's time to the target over the mode's. The machine is shared: the load average
before and after each run is printed next to it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_run import REPO, run_trainer

DEMO = REPO / "examples" / "demo_grpo_cpu.yaml"
MODES = {
    "sync": ("rollout_mode=sync",),
    "one_step_off": ("rollout_mode=one_step_off",),
    "async": ("rollout_mode=async",),
}
ONE_THREAD = ("+actor_train.system_envs.OMP_NUM_THREADS='1'", "+actor_infer.system_envs.OMP_NUM_THREADS='1'")
LOG_PROBS = {
    "engine": ("use_rollout_log_probs=true", "off_policy_correction=none"),
    "recompute": ("use_rollout_log_probs=false", "off_policy_correction=tis"),
}


def run_mode(config: Path, mode: str, steps: int, ratio: int, workers: str, extra: list[str], root: Path) -> dict:
    overrides = [f"max_steps={steps}", "eval_steps=0", f"save_steps={steps}",
                 "track_with=none", "actor_infer.device_mapping=[1]", *ONE_THREAD, *MODES[mode],
                 f"async_generation_ratio={ratio if mode == 'async' else 0}", *extra]
    run = run_trainer(config, root / mode, overrides, workers=workers, name=mode)
    curve = [(t, values) for _, t, values in run["metrics"]]
    rewards = [m["reward/mean"] for _, m in curve]
    steady = [m for _, m in curve[10:]]
    return {"mode": mode, "times": [t for t, _ in curve], "rewards": rewards,
            "wall": curve[-1][0], "total": run["total"],
            "final": sum(rewards[-20:]) / len(rewards[-20:]),
            "staleness": sum(m.get("async/staleness_mean", 0.0) for _, m in curve) / len(curve),
            "step_s": _mean(steady, "timing/step"),
            "generation_s": _mean(steady, "timing/generate") + _mean(steady, "timing/reward"),
            "weight_sync_s": _mean(steady, "timing/weight_sync"),
            "load": run["load"]}


def _mean(metrics: list[dict[str, float]], key: str) -> float:
    return sum(m.get(key, 0.0) for m in metrics) / max(1, len(metrics))


def time_to(result: dict, target: float, window: int = 10) -> float | None:
    """First time the moving average of `window` steps of reward/mean reaches `target`."""
    rewards, times = result["rewards"], result["times"]
    for i in range(window - 1, len(rewards)):
        if sum(rewards[i - window + 1 : i + 1]) / window >= target:
            return times[i]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEMO)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--ratio", type=int, default=2, help="async_generation_ratio of the async mode")
    parser.add_argument("--log-probs", default="engine", choices=list(LOG_PROBS),
                        help="old log-probs of the PPO ratio, for every mode (see above)")
    parser.add_argument("--workers", default="ray", choices=["ray", "local"])
    parser.add_argument("--target", type=float, default=None, help="reward to compare times at")
    parser.add_argument("--repeats", type=int, default=1, help="runs per mode (interleaved); the best is kept")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every run, key=value")
    parser.add_argument("--smoke", action="store_true", help="12 steps of each mode, local workers (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.workers = 12, "local"

    extra = [*LOG_PROBS[args.log_probs], *args.extra]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        for repeat in range(args.repeats):
            for mode in args.modes:
                result = run_mode(args.config, mode, args.steps, args.ratio, args.workers, extra,
                                  Path(tmp) / str(repeat))
                print(f"  {mode:13s} run {repeat + 1}: {args.steps / result['wall']:.2f} steps/s, final reward "
                      f"{result['final']:.3f}, load {result['load'][0]:.2f} -> {result['load'][1]:.2f}", flush=True)
                if mode not in results or result["wall"] < results[mode]["wall"]:
                    results[mode] = result
    target = args.target if args.target is not None else 0.9 * min(r["final"] for r in results.values())
    base = results.get("sync")
    base_time = time_to(base, target) if base else None
    print(f"\n{args.config.stem} {' '.join(extra)}, {args.steps} steps, workers "
          f"{args.workers}, actor_train and actor_infer one core each; target reward {target:.3f} (10-step moving "
          "average)")
    if base:  # hiding all of generation, scoring and the weight sync is the most overlap can give (Amdahl)
        hidden = base["generation_s"] + base["weight_sync_s"]
        bound = base["step_s"] / (base["step_s"] - hidden)
        print(f"sync step {base['step_s'] * 1000:.0f} ms, of which generation + scoring "
              f"{base['generation_s'] * 1000:.0f} ms and weight sync {base['weight_sync_s'] * 1000:.0f} ms: overlap "
              f"can speed a step up by at most {bound:.2f}x")
    print()
    print("| mode | steps/s | speedup (steps/s) | steady step (ms) | final reward | mean staleness | "
          "time to target (s) | speedup at equal reward | load avg before -> after |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mode, r in results.items():
        rate = args.steps / r["wall"]
        reach = time_to(r, target)
        speed = f"{rate / (args.steps / base['wall']):.2f}x" if base else "-"
        equal = f"{base_time / reach:.2f}x" if base_time and reach else "-"
        print(f"| {mode} | {rate:.2f} | {speed} | {r['step_s'] * 1000:.1f} | {r['final']:.3f} | {r['staleness']:.2f} | "
              f"{f'{reach:.1f}' if reach is not None else 'not reached'} | {equal} | "
              f"{r['load'][0]:.2f} -> {r['load'][1]:.2f} |")
    if base:
        print("ratio steps/s to sync: " + ", ".join(f"{mode} {base['wall'] / r['wall']:.2f}x"
                                                  for mode, r in results.items() if mode != "sync"))


if __name__ == "__main__":
    main()
