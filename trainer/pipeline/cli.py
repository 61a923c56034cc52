"""`python -m trainer run CONFIG [overrides…] [--run-id] [--attempt] [--events-redis] [--workers]`.

Exit codes (docs/decisions/0001): 0 ok, 2 invalid config (issues on stderr, no traceback; a
`status: failed` event is still written when the config names an output_dir), 1 training failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_CONFIG = 2


def add_run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="train: run the RLVR pipeline described by a config")
    run.add_argument("config", help="YAML config file (native/ROLL, verl, SkyRL or RLinf)")
    run.add_argument("overrides", nargs="*", help="overrides: a.b=c, +new.key=v, ~key")
    run.add_argument("--run-id", default=None, help="run id in events (default: $POLICYLAB_RUN_ID, then exp_name)")
    run.add_argument("--attempt", type=int, default=None, help="attempt number (default: $POLICYLAB_ATTEMPT or 1)")
    run.add_argument("--events-redis", default=None,
                     help="redis:// URL of the event stream (default: $POLICYLAB_EVENTS_REDIS_URL)")
    run.add_argument("--workers", choices=["ray", "local"], default="ray",
                     help="ray: role workers are Ray actors placed by device_mapping (default); "
                          "local: every role in this process (debugging, single-process CPU runs)")
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    from trainer.config import ConfigError, load_config
    from trainer.pipeline.runner import RunIdentity, run_training

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"invalid config {args.config}:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        _report_config_failure(args, f"invalid config: {len(exc.issues)} error(s); first: "
                                     f"{exc.issues[0].path}: {exc.issues[0].message}" if exc.issues else str(exc))
        return EXIT_CONFIG
    except (OSError, ValueError) as exc:
        print(f"invalid config {args.config}: {exc}", file=sys.stderr)
        _report_config_failure(args, f"invalid config: {exc}")
        return EXIT_CONFIG
    identity = RunIdentity.from_env(cfg, args.run_id, args.attempt, args.events_redis)
    return run_training(cfg, identity, backend=args.workers)


def _report_config_failure(args: argparse.Namespace, message: str) -> None:
    """Best effort: a `status: failed` event where the (unvalidated) config says the run lives."""
    from trainer.pipeline.telemetry import open_emitter_at

    try:
        from trainer.config import load_raw

        raw = load_raw(args.config, args.overrides)
    except Exception:
        raw = {}
    output_dir = raw.get("output_dir") if isinstance(raw, dict) else None
    run_id = args.run_id or _env("POLICYLAB_RUN_ID") or (raw.get("exp_name") if isinstance(raw, dict) else None)
    redis_url = args.events_redis or _env("POLICYLAB_EVENTS_REDIS_URL")
    if not run_id or not (output_dir or redis_url):
        return
    emitter = open_emitter_at(output_dir, str(run_id), int(args.attempt or _env("POLICYLAB_ATTEMPT") or 1), redis_url)
    emitter.status("failed", step=0, total_steps=None, message=message)
    emitter.close()


def _env(name: str) -> str | None:
    import os

    return os.environ.get(name) or None
