"""Bodies of `python -m trainer validate` and `python -m trainer schema` (torch-free)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TextIO

EXIT_OK = 0
EXIT_INVALID = 2


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
) -> int:
    from trainer.config import config_to_yaml, validate_config

    out = out or sys.stdout
    err = err or sys.stderr
    result = validate_config(config, overrides, source_format)
    if not result.ok or result.config is None:
        print(f"{config}: invalid config ({len(result.errors)} error(s)):", file=err)
        for issue in result.issues:
            print(issue, file=err)
        return EXIT_INVALID
    for issue in result.warnings:
        print(issue, file=err)
    summary = f"{config}: OK (format {result.source_format})\nderived values:\n{format_derived(result.derived)}"
    if show:
        out.write(config_to_yaml(result.config))
        print(summary, file=err)
    else:
        print(summary, file=out)
    return EXIT_OK


def run_schema(markdown: bool = False, out: TextIO | None = None) -> int:
    from trainer.config.export import config_json_schema, config_markdown

    out = out or sys.stdout
    if markdown:
        out.write(config_markdown())
    else:
        out.write(json.dumps(config_json_schema(), indent=2) + "\n")
    return EXIT_OK
