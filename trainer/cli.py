"""`python -m trainer …`: a small argparse tree. Each subcommand's body lives in its own module and
is imported inside its handler, so `validate` and `schema` never import torch."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def _validate(args: argparse.Namespace) -> int:
    from trainer.config.commands import run_validate

    return run_validate(args.config, args.overrides, source_format=args.source_format, show=args.show)


def _schema(args: argparse.Namespace) -> int:
    from trainer.config.commands import run_schema

    return run_schema(markdown=args.markdown)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer", description="PolicyLab RL trainer")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = sub.add_parser("validate", help="check a config and print derived batch sizes")
    validate.add_argument("config", help="YAML config file (native/ROLL, verl, SkyRL or RLinf)")
    validate.add_argument("overrides", nargs="*", help="overrides: a.b=c, +new.key=v, ~key")
    validate.add_argument("--show", action="store_true", help="print the resolved native config as YAML")
    validate.add_argument(
        "--from", dest="source_format", default="auto", choices=["auto", "roll", "verl", "skyrl", "rlinf"],
        help="format of the file (default: detect)",
    )
    validate.set_defaults(handler=_validate)

    schema = sub.add_parser("schema", help="print the config JSON Schema")
    schema.add_argument("--markdown", action="store_true", help="print the Markdown field reference instead")
    schema.set_defaults(handler=_schema)

    from trainer.config.importers.cli import add_import_parser  # torch-free

    add_import_parser(sub)

    from trainer.pipeline.cli import add_run_parser  # torch-free; the body imports torch lazily

    add_run_parser(sub)

    from trainer.models.cli import add_make_tiny_model_parser  # torch-free; the body imports torch lazily

    add_make_tiny_model_parser(sub)
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
