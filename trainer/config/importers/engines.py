"""Backends a file names that this build does not have, and the override that runs the same file on one it has.

A config (native or foreign) may name an engine PolicyLab does not build (SGLang). Validation reports that as one
`not_built` error per key of the user's file, and the error names the override that runs the file on what is
built: for a foreign file the framework's own key and spelling (`actor_rollout_ref.rollout.name=vllm` for verl,
`rollout.rollout_backend=vllm` for RLinf, `generator.backend=vllm` for SkyRL), found through the importer's rule
table (which key set the native strategy, and which foreign name converts to the replacement); for a ROLL file
the native key (`actor_infer.strategy_args.strategy_name=vllm`). With that override the file validates: the
importers translate the other engine's settings (SGLANG_NAMES) or report them as not applying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any

from trainer.config.importers.common import REPLACEMENTS
from trainer.config.issues import ConfigIssue

STRATEGY_KEY = ".strategy_args.strategy_name"  # where a role names its engine


def foreign_spelling(module: ModuleType, source: str, native: str) -> Any:
    """The value of the foreign key `source` that the importer converts to the native name `native` (the
    rule's choice table read backwards), else `native` itself."""
    for rule in module.RULES:
        table = getattr(rule.convert, "table", None)
        if rule.source == source and isinstance(table, Mapping):
            return next((foreign for foreign, ours in table.items() if ours == native), native)
    return native


def override_for(fmt: str, native_path: str, value: str, origin: Mapping[str, str]) -> tuple[str, str] | None:
    """(key of the user's file, override) that replaces the unbuilt engine `value` at `native_path`; None when no
    built engine stands in for it or the key that chose it is unknown."""
    replacement = REPLACEMENTS.get(value)
    if replacement is None:
        return None
    if fmt == "roll":
        return native_path, f"{native_path}={replacement}"
    source = origin.get(native_path)
    if source is None:
        return None
    from trainer.config.importers import IMPORTERS

    return source, f"{source}={foreign_spelling(IMPORTERS[fmt], source, replacement)}"


def name_the_override(fmt: str, issues: Sequence[ConfigIssue], origin: Mapping[str, str],
                      chosen: Mapping[str, str]) -> list[ConfigIssue]:
    """`issues` with each not_built error on a role's strategy_name (`chosen`: native path -> strategy) rewritten
    to name the key of the user's file and the override that runs the file on a built engine; several roles
    chosen by one key give one error."""
    out: list[ConfigIssue] = []
    seen: set[str] = set()
    for issue in issues:
        value = chosen.get(issue.path, "")
        found = override_for(fmt, issue.path, value, origin) if issue.kind == "not_built" else None
        if found is None:
            out.append(issue)
            continue
        key, override = found
        if key in seen:
            continue
        seen.add(key)
        out.append(replace(issue, path=key, message=f"{issue.message}; run this file on {REPLACEMENTS[value]} with "
                                                    f"the override {override}"))
    return out
