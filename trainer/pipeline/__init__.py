"""The RLVR training loop and its glue (see docs/decisions/0006-rlvr-engine.md).

- `runner.run_training(cfg, RunIdentity(...), backend="ray"|"local") -> exit code`: the whole run.
- `rlvr.RLVRPipeline`: the single-controller loop (generate, score, log-probs, values,
  advantages, updates, weight sync, eval, checkpoints, telemetry).
- `agentic.AgenticPipeline`: the multi-turn loop on the same machinery, environments instead of
  prompts (docs/decisions/0015-agentic-pipeline.md); `trajectory`: episodes played turn by turn.
- `learner.Learner`: a rollout batch in, new weights and a `LearnResult` out (decision 0051).
- `run/`: the run infrastructure around the loops (ledger, resume report, watchdog, health, telemetry,
  profiling, tiny models; decision 0057), which never imports them.
"""
