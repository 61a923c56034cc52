"""Run infrastructure: what a run needs around its loop, not the RL step itself (docs/decisions/0057).

- `ledger`: every prompt's fate in `ledger.jsonl` (what a resume replays); `resume_report`: whether a resumed
  attempt adds up.
- `watchdog`: a phase past its bound, reported with stacks; `health`: the run-health alerts after each step.
- `telemetry`: the run's event emitter, tracker and system samples; `profiling`: the profiler window per step.
- `models`: `tiny://` model references materialised in the run directory.

Nothing here imports the loops (`rlvr`, `agentic`), the learner or the rollout machinery of `trainer.pipeline`
(`tests/test_repository.py::test_run_infrastructure_never_imports_the_loops`); the loops and `runner` import it.
"""
