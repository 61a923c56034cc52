"""The RLVR training loop and its glue (see docs/decisions/0006-rlvr-engine.md).

- `runner.run_training(cfg, RunIdentity(...), backend="ray"|"local") -> exit code`: the whole run.
- `rlvr.RLVRPipeline`: the single-controller loop (generate, score, log-probs, values,
  advantages, updates, weight sync, eval, checkpoints, telemetry).
- `cli`: the `python -m trainer run` subcommand.
"""
