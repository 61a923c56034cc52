"""`python -m trainer COMMAND …` (installed: `policylab-trainer COMMAND …`): the trainer's one command-line entry.

    validate CONFIG [overrides…] [--show] [--preflight [--workers ray|local]]   check a config (and this machine)
    schema [--markdown]                                   the config JSON Schema / Markdown reference
    import CONFIG [-o native.yaml] | --mapping-table F    verl / SkyRL / RLinf -> native YAML
    run CONFIG [overrides…] [--workers ray|local] …       train
    make-tiny-model DIR [--size] [--seed]                 a local HF-format tiny Qwen2 + tokenizer
    ledger RUN_DIR                                        what happened to every prompt the run drew

Exit codes (docs/decisions/0001): 0 ok; 2 invalid input: a config that does not validate, paths
outside the platform's policy, or a failed preflight (issues on stderr, no traceback; `run`
still writes a `status: failed` event where the config says the run lives); 1 training failed
(`ledger`: prompts lost or duplicated).
Heavy packages are imported inside the handlers, so `validate`, `schema` and `import` never
import torch. This module is the only place that opens a config file (as a Path).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from trainer.config.tiny_shapes import SIZES

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
RAY_MISSING = ("--workers ray needs the ray package, which is not installed here: "
               "pip install 'ray[default]', or run with --workers local")


# ---------------------------------------------------------------------------------------------
# validate / schema / import (torch-free)


def format_derived(derived: dict[str, object]) -> str:
    width = max((len(k) for k in derived), default=0)
    return "\n".join(f"  {key.ljust(width)}  {value}" for key, value in derived.items())


def run_validate(
    config: str,
    overrides: Sequence[str],
    source_format: str = "auto",
    show: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    preflight: bool = False,
    workers: str = "ray",
) -> int:
    from trainer.config import config_to_yaml, validate_config
    from trainer.config.loading import config_environment

    out = out or sys.stdout
    err = err or sys.stderr
    result = validate_config(Path(config), overrides, source_format, env=config_environment())
    if show and result.config is not None:  # coherent, even if this build lacks one of its backends
        out.write(config_to_yaml(result.config))
    if not result.ok or result.config is None:
        print(f"{config}: invalid config ({len(result.errors)} error(s)):", file=err)
        for issue in result.issues:
            print(issue, file=err)
        if result.derived:  # coherent, but this build lacks a backend it names
            print(f"derived values:\n{format_derived(result.derived)}", file=err)
        return EXIT_INVALID
    for issue in result.warnings:
        print(issue, file=err)
    if preflight:
        from trainer.config.preflight import preflight as check_machine

        missing = check_machine(result.config, backend=workers)
        if missing:
            print(f"{config}: valid, but cannot run on this machine (preflight, {len(missing)} finding(s)):", file=err)
            for issue in missing:
                print(issue, file=err)
            return EXIT_INVALID
    summary = f"{config}: OK (format {result.source_format})\nderived values:\n{format_derived(result.derived)}"
    print(summary, file=err if show else out)
    return EXIT_OK


def run_schema(markdown: bool = False, out: TextIO | None = None) -> int:
    from trainer.config.export import config_json_schema, config_markdown

    out = out or sys.stdout
    if markdown:
        out.write(config_markdown())
    else:
        out.write(json.dumps(config_json_schema(), indent=2) + "\n")
    return EXIT_OK


def run_import(
    config: str,
    overrides: Sequence[str] = (),
    source_format: str = "auto",
    output: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the native YAML of a foreign config (or write it with -o); `${oc.env:…}` stays as written."""
    from trainer.config import config_to_yaml, validate_config

    out = out or sys.stdout
    err = err or sys.stderr
    result = validate_config(Path(config), overrides, source_format)
    if result.config is None or result.rule_errors:
        print(f"{config}: cannot import ({len(result.errors)} error(s)):", file=err)
        for issue in result.issues:
            print(f"  {issue}", file=err)
        return EXIT_INVALID
    # The translation stands even where this build lacks a backend the file names: said, not refused.
    for issue in [*result.errors, *result.warnings]:
        print(f"  {issue}", file=err)
    text = f"# imported from {config} ({result.source_format} format) by `python -m trainer import`\n"
    text += config_to_yaml(result.config)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        print(f"{config}: {result.source_format} config written as native YAML to {output} "
              f"({len(result.warnings)} warning(s))", file=err)
    else:
        out.write(text)
    return EXIT_OK


def _import(args: argparse.Namespace) -> int:
    if args.mapping_table:
        from trainer.config.importers.docs import mapping_table

        sys.stdout.write(mapping_table(args.mapping_table))
        return EXIT_OK
    if not args.config:
        print("import: a CONFIG file is required (or --mapping-table FORMAT)", file=sys.stderr)
        return EXIT_INVALID
    return run_import(args.config, args.overrides, args.source_format, args.output)


# ---------------------------------------------------------------------------------------------
# run (imports torch inside)


def _run(args: argparse.Namespace) -> int:
    from trainer.config import ConfigError, load_config
    from trainer.config.loading import config_environment
    from trainer.config.preflight import installed, preflight
    from trainer.config.secrets import run_secrets
    from trainer.pipeline.runner import RunIdentity, run_training

    if args.exit_with_parent:  # armed first: a cancel may land while the config and preflight still run
        exit_when_orphaned()
    run_secrets()  # the team secrets the platform passed, out of the environment before anything starts a process
    if args.workers == "ray" and not installed("ray"):  # one line, before anything else is looked at
        _report_config_failure(args, RAY_MISSING)
        return EXIT_INVALID
    try:
        cfg = load_config(Path(args.config), args.overrides, env=config_environment())
    except ConfigError as exc:
        print(f"invalid config {args.config}:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue.path}: {issue.message}", file=sys.stderr)
        first = f"; first: {exc.issues[0].path}: {exc.issues[0].message}" if exc.issues else ""
        _report_config_failure(args, f"invalid config: {len(exc.issues)} error(s){first}")
        return EXIT_INVALID
    except (OSError, ValueError) as exc:
        print(f"invalid config {args.config}: {exc}", file=sys.stderr)
        _report_config_failure(args, f"invalid config: {exc}")
        return EXIT_INVALID
    for what, refused in (("paths outside what this run may touch", confinement_issues(cfg)),
                          ("preflight failed", preflight(cfg, backend=args.workers))):
        if refused:
            print(f"invalid config {args.config}: {what}:", file=sys.stderr)
            for issue in refused:
                print(f"  {issue.path}: {issue.message}", file=sys.stderr)
            summary = "; ".join(f"{i.path or '(config)'}: {i.message}" for i in refused)
            _report_config_failure(args, f"{what}: {summary}")
            return EXIT_INVALID
    identity = RunIdentity.from_env(cfg, args.run_id, args.attempt, args.events_redis)
    return run_training(cfg, identity, backend=args.workers)


def exit_when_orphaned(poll_s: float = 1.0) -> threading.Thread:
    """SIGTERM this process (a cancel, as Ray's stop_job sends it) once its parent is gone.

    Ray's stop_job that lands while a job is still starting kills the job's supervisor actor, and the
    entrypoint it had just spawned (in a session of its own) trains on, orphaned, with nobody to stop it
    (seen with Ray 2.60: the job STOPPED after 1 s, its trainer still training minutes later). The
    platform's supervisor passes --exit-with-parent so a cancelled run never leaves such a trainer.
    A parent of 1 (init) when the watch is armed means the parent was gone before the interpreter got
    here (a stop 1 s after the start): such a process is an orphan at once. (Where a subreaper adopts
    orphans instead of init, that early case is not caught; the later one is.)"""
    parent = os.getppid()

    def watch() -> None:
        while parent != 1 and os.getppid() == parent:
            time.sleep(poll_s)
        print(f"trainer: parent process {parent} is gone (the Ray job was stopped); stopping", file=sys.stderr,
              flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, daemon=True, name="exit-when-orphaned")
    thread.start()
    return thread


def confinement_issues(cfg: PipelineConfig) -> list[Any]:
    """On the platform (POLICYLAB_READ_ROOTS set by the supervisor), the config's paths checked on
    this machine's disk, symlinks resolved, before any file is opened. Empty for CLI use."""
    from trainer.config.confinement import PathPolicy, check_confinement

    policy = PathPolicy.from_env(run_dir=cfg.output_dir)
    return check_confinement(cfg, policy, on_disk=True) if policy else []


def _report_config_failure(args: argparse.Namespace, message: str) -> None:
    """The refusal as the last line of stderr ("training refused: …", which the platform's supervisor
    shows as the run's reason), and, best effort, a `status: failed` event where the (unvalidated)
    config says the run lives."""
    from trainer.pipeline.run.telemetry import open_emitter_at

    print(f"training refused: {message}", file=sys.stderr, flush=True)

    try:
        from trainer.config import load_raw
        from trainer.config.loading import config_environment

        raw = load_raw(Path(args.config), args.overrides, env=config_environment())
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
    return os.environ.get(name) or None


# ---------------------------------------------------------------------------------------------
# make-tiny-model (imports torch inside)


def _make_tiny_model(args: argparse.Namespace) -> int:
    from trainer.models.tiny import build_tiny_model

    out = build_tiny_model(args.dir, size=args.size, seed=args.seed)
    print(f"wrote a randomly initialised {args.size} Qwen2 model and its tokenizer to {out}", file=sys.stdout)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# ledger (torch-free)


def run_ledger(run_dir: str, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Print the accounting of RUN_DIR/ledger.jsonl (or of that file); 1 when a prompt was lost or duplicated."""
    from trainer.pipeline.run.ledger import LEDGER_FILE, account, format_accounting, read_ledger

    out = out or sys.stdout
    err = err or sys.stderr
    path = Path(run_dir)
    path = path / LEDGER_FILE if path.is_dir() else path
    if not path.is_file():
        print(f"{run_dir}: no {LEDGER_FILE} here (not a run directory, or a run older than the ledger)", file=err)
        return EXIT_INVALID
    records, torn = read_ledger(path)
    result = account(records, torn)
    out.write(format_accounting(path, result))
    return EXIT_OK if result.ok else EXIT_FAILED


# ---------------------------------------------------------------------------------------------
# the parser


def build_parser() -> argparse.ArgumentParser:
    from trainer.config.importers import IMPORTERS, SOURCE_FORMATS  # torch-free

    # `policylab-trainer` is the installed console script (pyproject.toml) of the same main()
    prog = "policylab-trainer" if Path(sys.argv[0]).name == "policylab-trainer" else "python -m trainer"
    parser = argparse.ArgumentParser(prog=prog, description="PolicyLab RL trainer")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = sub.add_parser("validate", help="check a config and print derived batch sizes")
    validate.add_argument("config", help="YAML config file (native/ROLL, verl, SkyRL or RLinf)")
    validate.add_argument("overrides", nargs="*", help="overrides: a.b=c, +new.key=v, ~key")
    validate.add_argument("--show", action="store_true", help="print the resolved native config as YAML")
    validate.add_argument(
        "--preflight", action="store_true",
        help="also check this machine: packages, GPUs, model and data paths (what `run` checks first)",
    )
    validate.add_argument("--workers", choices=["ray", "local"], default="ray",
                          help="with --preflight: the backend `run --workers` will use (local needs no Ray)")
    validate.add_argument("--from", dest="source_format", default="auto", choices=SOURCE_FORMATS,
                          help="format of the file (default: detect)")
    validate.set_defaults(handler=lambda a: run_validate(
        a.config, a.overrides, source_format=a.source_format, show=a.show, preflight=a.preflight,
        workers=a.workers))

    schema = sub.add_parser("schema", help="print the config JSON Schema")
    schema.add_argument("--markdown", action="store_true", help="print the Markdown field reference instead")
    schema.set_defaults(handler=lambda a: run_schema(markdown=a.markdown))

    imp = sub.add_parser("import", help="translate a verl / SkyRL / RLinf config into native YAML")
    imp.add_argument("config", nargs="?", help="YAML config file in a foreign (or native) format")
    imp.add_argument("overrides", nargs="*", help="overrides applied to the source file: a.b=c")
    imp.add_argument("--from", dest="source_format", default="auto", choices=SOURCE_FORMATS,
                     help="format of the file (default: detect)")
    imp.add_argument("-o", "--output", help="write the native YAML here instead of printing it")
    imp.add_argument("--mapping-table", choices=list(IMPORTERS), metavar="FORMAT",
                     help="print the key mapping table of an importer (Markdown) and exit")
    imp.set_defaults(handler=_import)

    run = sub.add_parser("run", help="train: run the RLVR pipeline described by a config")
    run.add_argument("config", help="YAML config file (native/ROLL, verl, SkyRL or RLinf)")
    run.add_argument("overrides", nargs="*", help="overrides: a.b=c, +new.key=v, ~key")
    run.add_argument("--run-id", default=None, help="run id in events (default: $POLICYLAB_RUN_ID, then exp_name)")
    run.add_argument("--attempt", type=int, default=None, help="attempt number (default: $POLICYLAB_ATTEMPT or 1)")
    run.add_argument("--events-redis", default=None,
                     help="redis:// URL of the event stream (default: $POLICYLAB_EVENTS_REDIS_URL)")
    run.add_argument("--workers", choices=["ray", "local"], default="ray",
                     help="ray: role workers are Ray actors placed by device_mapping (default); "
                          "local: every role in this process (debugging, single-process CPU runs; needs no Ray)")
    run.add_argument("--exit-with-parent", action="store_true",
                     help="stop (as on SIGTERM) when the parent process exits: the platform's Ray jobs use it")
    run.set_defaults(handler=_run)

    tiny = sub.add_parser("make-tiny-model", help="build a tiny random Qwen2 model + byte-level tokenizer")
    tiny.add_argument("dir", help="output directory (HF format: config, safetensors, tokenizer)")
    tiny.add_argument("--size", default="tiny", choices=tuple(SIZES), help="model size (default: tiny)")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the random initialisation (default: 0)")
    tiny.set_defaults(handler=_make_tiny_model)

    ledger = sub.add_parser("ledger", help="account for every prompt a run drew (exit 1: lost or duplicated)")
    ledger.add_argument("run_dir", help="the run's output_dir (holding ledger.jsonl), or the ledger file")
    ledger.set_defaults(handler=lambda a: run_ledger(a.run_dir))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    # argparse stops filling `overrides` at the first option, so `validate c.yaml --show a=b` leaves
    # `a=b` over: take such leftovers as overrides, refuse anything else.
    stray = [t for t in extras if t.startswith("-") or ("=" not in t and not t.startswith("~"))]
    if stray or (extras and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if extras:
        args.overrides = [*args.overrides, *extras]
    return int(args.handler(args))
