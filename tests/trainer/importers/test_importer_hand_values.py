"""Importer semantics checked against independent expectations (issue 22).

test_importer_keys.py takes its expected values from the importers' own rule table (`rule.example`,
`rule.convert`, `rule.target`), so a rule pointing at the wrong native field, e.g. verl's
`clip_ratio_low` and `clip_ratio_high` with their targets swapped, passes there. Here the expected
native values are written by hand in hand_values/<format>.yaml, worked out from what each foreign key
means in its framework and what the native field means (docs/config.md), with the arithmetic of the
derived values in comments. A case is

    - case: a name
      base: verl             # a config of importer_testing.BASES, or `config:` with a whole file
      unset: [dotted.key]    # optional: keys of the base to drop first
      set: {dotted.key: value}
      expect: {native.path: value}   # paths in the validated config (config.model_dump())
      warned: [dotted.key]   # optional: keys that must be reported with a warning
      errors_expected: true  # optional: errors elsewhere (check_rules, companion keys) are allowed,
                             # never an error about a key the case sets

The coverage test reads the rule table only to learn WHICH keys are mapped: each one must be set by
some case, and for a direct mapping that case must check the rule's native target.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from importer_testing import SGLANG_RENAMES, base, set_key

from trainer.config.importers import rules_of, translate
from trainer.config.importers.rules import lookup, pop_path
from trainer.config.issues import ConfigIssue
from trainer.config.validation import build_config, check_rules

HAND_VALUES = Path(__file__).parent / "hand_values"
FORMATS = ("verl", "skyrl", "rlinf")


def _load(fmt: str) -> list[dict[str, Any]]:
    return yaml.safe_load((HAND_VALUES / f"{fmt}.yaml").read_text(encoding="utf-8"))


CASES = {fmt: _load(fmt) for fmt in FORMATS}
PARAMS = [pytest.param(fmt, case, id=f"{fmt}:{case['case']}") for fmt in FORMATS for case in CASES[fmt]]


def _raw(fmt: str, case: Mapping[str, Any]) -> dict[str, Any]:
    raw = copy.deepcopy(case["config"]) if "config" in case else base(case.get("base", fmt))
    for path in case.get("unset", []):
        pop_path(raw, path)
    for path, value in (case.get("set") or {}).items():
        set_key(raw, path, value)
    return raw


def _paths(tree: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted path of a nested mapping, sections included."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            yield path
            yield from _paths(value, f"{path}.")


def _written(case: Mapping[str, Any]) -> set[str]:
    """The foreign keys a case writes itself (not those it inherits from its base)."""
    written = set(_paths(case.get("config") or {}))
    for path, value in (case.get("set") or {}).items():
        written.add(path)
        written.update(_paths(value, f"{path}."))
    return written


def _about(issues: list[ConfigIssue], keys: set[str]) -> list[ConfigIssue]:
    return [i for i in issues if any(i.path == k or i.path.startswith(f"{k}.") for k in keys)]


@pytest.mark.parametrize(("fmt", "case"), PARAMS)
def test_hand_written_case(fmt: str, case: dict[str, Any]) -> None:
    native, issues = translate(_raw(fmt, case), fmt)
    errors = [i for i in issues if i.severity == "error"]
    assert not _about(errors, _written(case)), [str(i) for i in errors]
    config, schema_issues = build_config(native)
    assert config is not None, [str(i) for i in schema_issues]
    if not case.get("errors_expected"):
        errors += [i for i in check_rules(config) if i.severity == "error"]
        assert not errors, [str(i) for i in errors]
    dumped = config.model_dump()
    wrong = {}
    for path, expected in case["expect"].items():
        found, value = lookup(dumped, path)
        if not found or value != (pytest.approx(expected) if isinstance(expected, float) else expected):
            wrong[path] = f"expected {expected!r}, got {value!r}" if found else "missing"
    assert not wrong, wrong
    for key in case.get("warned", []):
        assert any(i.severity == "warning" for i in _about(issues, {key})), f"{key} not reported: {issues}"


def _targets(target: str) -> set[str]:
    """The native path of a direct rule, and its name under SGLang (tp_size, mem_fraction_static, …)."""
    parent, _, key = target.rpartition(".")
    if parent.endswith("strategy_config") and key in SGLANG_RENAMES:
        return {target, f"{parent}.{SGLANG_RENAMES[key]}"}
    return {target}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_mapped_key_has_a_hand_written_case(fmt: str) -> None:
    uncovered = []
    for rule in rules_of(fmt):
        if rule.target is None:
            continue
        setting = [case for case in CASES[fmt] if rule.source in _written(case)]
        if not setting:
            uncovered.append(f"{rule.source} (set by no case)")
        elif not rule.derived and not any(_targets(rule.target) & set(case["expect"]) for case in setting):
            uncovered.append(f"{rule.source} (no case setting it checks {rule.target})")
    listing = "\n".join(uncovered)
    assert not uncovered, f"{fmt}: {len(uncovered)} mapped keys without a hand-written case:\n{listing}"
