"""Body of `python -m trainer import CONFIG [--from FORMAT] [-o native.yaml]` (torch-free).

Prints the native YAML (or writes it with -o); warnings and errors go to stderr; exit 2 on errors.
`--mapping-table FORMAT` prints the generated docs/importers/<format>.md instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_INVALID = 2


def add_import_parser(sub: argparse._SubParsersAction) -> None:
    from trainer.config.importers import IMPORTERS, SOURCE_FORMATS

    parser = sub.add_parser("import", help="translate a verl / SkyRL / RLinf config into native YAML")
    parser.add_argument("config", nargs="?", help="YAML config file in a foreign (or native) format")
    parser.add_argument("overrides", nargs="*", help="overrides applied to the source file: a.b=c")
    parser.add_argument("--from", dest="source_format", default="auto", choices=SOURCE_FORMATS,
                        help="format of the file (default: detect)")
    parser.add_argument("-o", "--output", help="write the native YAML here instead of printing it")
    parser.add_argument("--mapping-table", choices=list(IMPORTERS), metavar="FORMAT",
                        help="print the key mapping table of an importer (Markdown) and exit")
    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    if args.mapping_table:
        from trainer.config.importers.docs import mapping_table

        sys.stdout.write(mapping_table(args.mapping_table))
        return EXIT_OK
    if not args.config:
        print("import: a CONFIG file is required (or --mapping-table FORMAT)", file=sys.stderr)
        return EXIT_INVALID
    return run_import(args.config, args.overrides, args.source_format, args.output)


def run_import(
    config: str,
    overrides: Sequence[str] = (),
    source_format: str = "auto",
    output: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    from trainer.config import config_to_yaml, validate_config

    out = out or sys.stdout
    err = err or sys.stderr
    result = validate_config(config, overrides, source_format)
    if not result.ok or result.config is None:
        print(f"{config}: cannot import ({len(result.errors)} error(s)):", file=err)
        for issue in result.issues:
            print(f"  {issue}", file=err)
        return EXIT_INVALID
    for issue in result.warnings:
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
