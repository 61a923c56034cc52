"""No input, however broken, produces a traceback: validate_config always answers with issues."""

from __future__ import annotations

from typing import Any

from config_testing import base
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from trainer.config import validate_config
from trainer.config.schema import STRATEGY_CONFIG_MODELS, PipelineConfig, RewardWorkerConfig


def _field_names() -> list[str]:
    names: set[str] = set()
    models: list[type[BaseModel]] = [PipelineConfig, RewardWorkerConfig, *STRATEGY_CONFIG_MODELS.values()]
    seen: set[type[BaseModel]] = set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        names.update(model.model_fields)
        for info in model.model_fields.values():
            for arg in (*getattr(info.annotation, "__args__", ()), info.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    models.append(arg)
    return sorted(names)


FIELD_NAMES = _field_names()
TRICKY_TEXT = st.sampled_from(
    ["${", "${nope}", "${oc.env:NOPE_NOT_SET}", "${subtract:a,b}", "list(range(0,8))", "__import__('os')",
     "range(10**9)", "auto", "megatron_train", "vllm", "1e-6", "", "\\${x}", "${int_div:1,0}"]
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**40), max_value=2**40), st.floats(allow_nan=True),
    st.text(max_size=20), TRICKY_TEXT,
)
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=12), st.integers(-3, 3))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=5)),
    max_leaves=25,
)
CONFIGS = st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=8)


def _check(result: Any) -> None:
    for issue in result.issues:
        assert isinstance(issue.path, str) and isinstance(issue.message, str) and issue.message
        assert "internal error" not in issue.message, issue
    assert result.ok == (not result.errors and result.config is not None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CONFIGS)
def test_garbage_mappings(raw: dict[str, Any]) -> None:
    _check(validate_config(raw))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["actor_train", "actor_infer", "critic", "reference", "rewards"]),
                       st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=5), max_size=3))
def test_garbage_worker_sections_on_a_valid_base(sections: dict[str, Any]) -> None:
    raw = base()
    raw.update(sections)
    _check(validate_config(raw))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_garbage_yaml_text(text: str) -> None:
    _check(validate_config(text if "\n" in text or ":" in text else text + "\n"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.builds(lambda k, v: f"{k}={v}", st.sampled_from(FIELD_NAMES),
                                                          TRICKY_TEXT)), max_size=4))
def test_garbage_overrides(overrides: list[str]) -> None:
    _check(validate_config(base(), overrides))
