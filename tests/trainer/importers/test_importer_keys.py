"""Every documented key of verl, SkyRL and RLinf: set it to a distinctive value, import, and check
where it lands, or that it is reported (path, value, reason). Nothing may vanish silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from importer_testing import BASES, SGLANG_RENAMES, base, with_key

from trainer.config.importers import release_family, rules_of, translate
from trainer.config.importers.builtin import SURFACES
from trainer.config.importers.rules import lookup
from trainer.config.validation import build_config, check_rules

CASES = [pytest.param(fmt, rule, id=f"{fmt}:{rule.source}") for fmt in BASES for rule in rules_of(fmt)]


@pytest.fixture(scope="module")
def baselines() -> dict[str, dict[str, Any]]:
    out = {}
    for fmt in BASES:
        native, issues = translate(base(fmt), fmt)
        assert not [i for i in issues if i.severity == "error"], issues
        config, schema_issues = build_config(native)
        assert config is not None, schema_issues
        assert not [i for i in check_rules(config) if i.severity == "error"]
        out[fmt] = native
    return out


def _issues_at(issues: list, path: str) -> list:
    return [i for i in issues if i.path == path or i.path.startswith(f"{path}.")]


@pytest.mark.parametrize(("fmt", "rule"), CASES)
def test_every_documented_key_lands_or_is_reported(fmt: str, rule: Any, baselines: dict) -> None:
    raw = with_key(fmt, rule.source, rule.example)
    native, issues = translate(raw, fmt)
    here = _issues_at(issues, rule.source)
    unknown = [i for i in issues if "unknown key" in i.message]
    assert not unknown, unknown
    # the release's own default: the file chose nothing, so a key with nowhere to go is silent
    at_default = SURFACES[fmt].default(release_family(raw, fmt), rule.source) == (True, rule.example)
    if rule.target is None and not rule.derived:
        assert rule.implied != rule.example, "the example must differ from the silent value"
        if at_default:
            assert not here, issues
            return
        assert any(i.severity == "warning" and repr(rule.example)[:20] in i.message for i in here), issues
        return
    if rule.derived:
        # computed from several keys: the output must change, or the key must be reported
        assert native != baselines[fmt] or here or at_default, f"{rule.source} changed nothing and was not reported"
        return
    expected = rule.convert(rule.example) if rule.convert else rule.example
    target = _engine_name(native, rule.target)
    found, value = lookup(native, target)
    if not found:  # a setting of another backend than the one chosen, or of a role not created
        assert any(i.severity == "warning" for i in here) or (at_default and not here), issues
        return
    if value != expected:  # another key of the base config set the same native field first
        assert any("conflicts with" in i.message for i in here), issues
        return
    assert not [i for i in here if i.severity == "error"], issues
    if any(i.severity == "error" for i in issues):
        return  # the key landed; the config needs companion keys (e.g. a critic's micro-batch) to be valid
    config, schema_issues = build_config(native)
    assert config is not None, schema_issues
    assert lookup(config.model_dump(), target) == (True, expected)


def _engine_name(native: dict, target: str) -> str:
    """SGLang names some engine settings differently (tp_size, mem_fraction_static, …)."""
    base, _, key = target.rpartition(".")
    name = lookup(native, base.replace("strategy_config", "strategy_name"))[1] if base.endswith("strategy_config") else None
    if name == "sglang":
        key = SGLANG_RENAMES.get(key, key)
    return f"{base}.{key}" if base else key


def test_every_framework_documents_many_keys() -> None:
    counts = {fmt: len(rules_of(fmt)) for fmt in BASES}
    assert counts["verl"] >= 100 and counts["skyrl"] >= 80 and counts["rlinf"] >= 150, counts
    for fmt in BASES:
        sources = [rule.source for rule in rules_of(fmt)]
        assert len(sources) == len(set(sources)), f"{fmt}: a key is documented twice"


def test_every_seed_documented_key_has_a_rule() -> None:
    seed_keys = yaml.safe_load((Path(__file__).parent / "seed_keys.yaml").read_text(encoding="utf-8"))
    for fmt, keys in seed_keys.items():
        sources = {rule.source for rule in rules_of(fmt)}
        missing = [key for key in keys if key not in sources]
        assert not missing, f"{fmt}: seed keys without a rule: {missing}"
