"""Recognise the format of a raw config and translate it into the native (ROLL-layout) schema.

`detect_and_translate` is the one entry point: validate_config / load_config call it on every
loaded file, the web app calls it for "import a file", and `python -m trainer import` wraps it.
Each foreign format is a module with NAME, SIGNATURE (its top-level sections), REQUIRED (the
sections that identify it), DEFAULTS (its own defaults where ours differ), RULES and finish(); its
surface (builtin.SURFACES) knows every key of its releases, and which release a file belongs to.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from trainer.config.formats import FOREIGN_TOP_LEVEL_KEYS
from trainer.config.importers import rlinf, skyrl, verl
from trainer.config.importers.builtin import SURFACES
from trainer.config.importers.common import REPLACEMENTS, other_engine_names
from trainer.config.importers.rules import Rule, SourceValueError, Translation, apply_rules
from trainer.config.importers.surface import Family, flatten
from trainer.config.issues import ConfigIssue
from trainer.config.merge import deep_merge
from trainer.config.schema import PipelineConfig

logger = logging.getLogger(__name__)

IMPORTERS: dict[str, ModuleType] = {"verl": verl, "skyrl": skyrl, "rlinf": rlinf}
SOURCE_FORMATS: tuple[str, ...] = ("auto", "roll", *IMPORTERS)
ROLL_SIGNATURE = ("actor_train", "actor_infer")


def signatures_text() -> str:
    lines = [f"roll (native): {', '.join(ROLL_SIGNATURE)} (and pipeline keys such as rollout_batch_size)"]
    for name, module in IMPORTERS.items():
        lines.append(f"{name}: needs {' + '.join(module.REQUIRED)}; sections {', '.join(module.SIGNATURE)}")
    return "; ".join(lines)


def detect_format(raw: Mapping[str, Any]) -> tuple[str | None, str]:
    """(format, "") when the top-level keys identify exactly one format, else (None, why)."""
    keys = set(raw)
    matches = [name for name, module in IMPORTERS.items() if set(module.REQUIRED) <= keys]
    if keys & set(ROLL_SIGNATURE):
        matches.append("roll")
    if len(matches) == 1:
        return matches[0], ""
    if len(matches) > 1:
        return None, (f"ambiguous: the top-level keys match {' and '.join(matches)}; pass --from to choose. "
                      f"Signatures: {signatures_text()}")
    foreign_only = sorted(keys & (FOREIGN_TOP_LEVEL_KEYS - set(PipelineConfig.model_fields)))
    if foreign_only:
        return None, (f"unrecognised format: top-level sections {', '.join(foreign_only)} match no complete "
                      f"signature. Signatures: {signatures_text()}")
    return "roll", ""


def release_family(raw: Mapping[str, Any], fmt: str) -> Family:
    """The release family of `fmt` whose keys the file uses (builtin.SURFACES)."""
    return SURFACES[fmt].detect(dict(flatten(raw)))


def translate(raw: Mapping[str, Any], fmt: str) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """Translate a resolved foreign config with the importer named `fmt`."""
    native, issues, _ = translate_traced(raw, fmt)
    return native, issues


def translate_traced(raw: Mapping[str, Any], fmt: str) -> tuple[dict[str, Any], list[ConfigIssue], dict[str, str]]:
    """translate(), and which key of the source file set each native value (native path -> source key)."""
    module = IMPORTERS[fmt]
    surface, flat = SURFACES[fmt], dict(flatten(raw))
    family = surface.detect(flat)
    t = Translation(raw=deep_merge(module.DEFAULTS, raw), fmt=fmt, given=dict(raw), surface=surface,
                    family=family, variant=surface.variant_of(family, flat))
    apply_rules(t, module.RULES)
    if not any(issue.severity == "error" for issue in t.issues):
        try:
            module.finish(t)
        except SourceValueError as exc:
            t.error(exc.path, str(exc))
        except (TypeError, ValueError) as exc:  # a value of the wrong type met by the arithmetic
            t.error("", f"cannot translate this {fmt} config: {exc}")
    return t.native, t.issues, t.origin


def rules_of(fmt: str) -> list[Rule]:
    return list(IMPORTERS[fmt].RULES)


def detect_and_translate(
    raw: dict[str, Any], source_format: str = "auto"
) -> tuple[dict[str, Any], str, list[ConfigIssue]]:
    """Return (native raw dict, detected format, issues). Native ROLL configs pass through unchanged."""
    native, fmt, issues, _ = detect_and_translate_traced(raw, source_format)
    return native, fmt, issues


def detect_and_translate_traced(
    raw: dict[str, Any], source_format: str = "auto"
) -> tuple[dict[str, Any], str, list[ConfigIssue], dict[str, str]]:
    """detect_and_translate(), and the origin of each native value (native path -> key of the source file;
    empty for a native file, whose keys are their own origin)."""
    if source_format not in SOURCE_FORMATS:
        issue = ConfigIssue("", f"unknown source format {source_format!r}; choose one of {', '.join(SOURCE_FORMATS)}")
        return raw, "roll", [issue], {}
    if source_format == "auto":
        fmt, why = detect_format(raw)
        if fmt is None:
            return raw, "roll", [ConfigIssue("", why)], {}
    else:
        fmt = source_format
    if fmt == "roll":
        native, issues = other_engine_names(raw)
        return native, fmt, issues, {}
    native, issues, origin = translate_traced(raw, fmt)
    warnings = sum(1 for issue in issues if issue.severity == "warning")
    logger.warning("notice: read as a %s config (%s keys) and translated into the native schema (%d warning(s))",
                   fmt, release_family(raw, fmt).name, warnings)
    return native, fmt, issues, origin


def suggested_value(path: str) -> Any:
    """A value to show in the override that sets `path` (a key some importer maps): the name of a built engine
    where the key chooses one, else the rule's example; None for a key no rule names."""
    for module in IMPORTERS.values():
        for rule in module.RULES:
            if rule.source != path:
                continue
            table = getattr(rule.convert, "table", None)
            if isinstance(table, Mapping):
                built = [foreign for foreign, ours in table.items() if ours in REPLACEMENTS.values()]
                return built[0] if built else next(iter(table))
            return rule.example
    return None
