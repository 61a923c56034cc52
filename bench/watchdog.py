"""What the driver's watchdog (trainer.pipeline.run.watchdog) costs a step of the GRPO demo, on CPU.

    python bench/watchdog.py [--steps 30] [--rounds 3]

Two measurements, both in this process:
  1. end to end: the demo's steps with the watchdog watching every phase (poll every second, as the
     default) against the same steps without it, in alternating rounds (same seed, fresh run directory
     each); median s/step of each and their ratio. Step times on a busy machine vary by a few percent,
     more than the watchdog costs, so this ratio bounds the cost from above.
  2. direct: the time of one phase scope (enter + exit, the lock and the history) and of one check of the
     running phases, times the phases a step runs and the checks a step's seconds hold, as a fraction of
     the measured step time. This is the watchdog's own cost per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
OVERRIDES = ("eval_steps=0", "save_steps=1000", "track_with=none", "logging_steps=1000")


def demo_steps(steps: int, watched: bool, seed: int) -> float:
    """Median seconds per step of `steps` demo steps (after 2 warm-up steps), with or without the watchdog."""
    import torch

    from trainer.config import load_config
    from trainer.pipeline.run.telemetry import open_emitter
    from trainer.pipeline.run.watchdog import start_watchdog
    from trainer.pipeline.runner import RunIdentity, StartupPhases, _shutdown, prepare_pipeline

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(REPO / "examples" / "demo_grpo_cpu.yaml",
                          [*OVERRIDES, f"max_steps={steps + 2}", f"seed={seed}", f"output_dir={out}"])
        emitter, groups = open_emitter(cfg, RunIdentity(run_id="bench")), {}
        pipeline = prepare_pipeline(cfg, StartupPhases(emitter), backend="local", log=lambda line: None,
                                    groups=groups)
        interrupt = None
        if watched:
            pipeline.watchdog, interrupt = start_watchdog(cfg.watchdog, emitter, groups, Path(out),
                                                          log=lambda line: None, exit_codes={True: 1, False: 3})
        try:
            pipeline.run()
        finally:
            if interrupt is not None:
                pipeline.watchdog.stop()
                interrupt.close()
            emitter.close()
            _shutdown(groups)
        return statistics.median(pipeline.step_times[2:])


def direct_cost() -> tuple[float, float]:
    """Seconds of one phase scope (enter + exit) and of one check with one phase running."""
    from trainer.pipeline.run.watchdog import Bounds, Watchdog

    dog = Watchdog(Bounds(), report=lambda stall: None, recovered=lambda phase, s: None, waiting=list)
    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        with dog.phase("generate"):
            pass
    scope = (time.perf_counter() - started) / n
    with dog.phase("generate"):
        started = time.perf_counter()
        for _ in range(n):
            dog.check()
        check = (time.perf_counter() - started) / n
    return scope, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="2 steps, 1 round (CI: seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.rounds = 2, 1

    runs: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(args.rounds):
        for watched in (False, True) if round_ % 2 == 0 else (True, False):
            runs[watched].append(demo_steps(args.steps, watched, seed=round_))
    without, with_ = statistics.median(runs[False]), statistics.median(runs[True])
    scope, check = direct_cost()
    phases_per_step = 8  # generate, reward, old_log_probs (2 PPO epochs), advantages, actor_update, weight_sync, …
    per_step = phases_per_step * scope + max(1.0, with_) * check  # one check a second, at least one a step
    print(f"demo GRPO, {args.steps} steps x {args.rounds} rounds, local backend, 1 thread")
    print(f"  without watchdog  {without * 1e3:8.1f} ms/step (median of rounds: {', '.join(f'{r * 1e3:.1f}' for r in runs[False])})")
    print(f"  with watchdog     {with_ * 1e3:8.1f} ms/step (median of rounds: {', '.join(f'{r * 1e3:.1f}' for r in runs[True])})")
    print(f"  ratio with/without: {with_ / without:.4f}x (end to end; step-time noise included)")
    print(f"  one phase scope {scope * 1e6:.2f} us, one check {check * 1e6:.2f} us: "
          f"{per_step * 1e6:.1f} us a step = {100 * per_step / without:.4f} % of a step (the watchdog's own cost)")


if __name__ == "__main__":
    main()
