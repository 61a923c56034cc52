"""The schema's field status tells the truth (issue 11; docs/decisions/0011).

A field without an `inactive=` marker must be read by the engine; a field carrying one must not be.
"Read by the engine" is an AST scan of trainer/ outside trainer/config/ (plus topology.py, whose
placement arithmetic the workers use): every attribute name accessed (`args.temperature`) and every
string constant (`_arg(data_args, "prompt")`, `getattr(cfg, "seed")`). The scan matches names, not
owners, so a name shared with unrelated code (e.g. `name`) cannot prove a field inactive; such names
are listed in SHARED_NAMES and only checked in the acting direction.

How it fails: unwire a knob (delete the only line reading `generating_args.min_p`) and
test_every_acting_field_is_read_by_the_engine names `GeneratingArgs.min_p`; read a field marked
inactive (e.g. start using `l2`) and test_no_inactive_field_is_read_by_the_engine names it.
"""

from __future__ import annotations

import ast
import typing
from functools import cache
from pathlib import Path

import pytest
from config_testing import changed
from pydantic import BaseModel

from trainer.config import validate_config
from trainer.config.schema import PipelineConfig, field_status

REPO = Path(__file__).resolve().parents[3]
# topology.py's arithmetic places the workers (an acting field may be read there); the sizes of
# unbuilt backends are read there too, for validation's arithmetic only, so the inactive direction
# scans the engine proper. adapters.py holds ROLL's LoRA defaults the roles load adapters with (torch-free,
# for preflight too).
ENGINE_ALSO = (REPO / "trainer" / "config" / "topology.py", REPO / "trainer" / "config" / "adapters.py")
# Names that unrelated engine code uses too (attributes of other objects, generic words): the scan
# cannot tell whether such an inactive field is read, so only acting fields are checked for them.
SHARED_NAMES = frozenset({"name", "type", "device", "enabled", "stage", "seed", "tag", "id", "max_steps",
                          "local_rank", "num_labels", "model_type", "max_length", "bf16", "fp16",
                          "l2", "format_pattern", "max_grad_norm", "method", "detach"})


@cache
def engine_names(with_topology: bool = True) -> frozenset[str]:
    files = [p for p in (REPO / "trainer").rglob("*.py") if (REPO / "trainer" / "config") not in p.parents]
    names: set[str] = set()
    for path in [*files, *(ENGINE_ALSO if with_topology else ())]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return frozenset(names)


def schema_models() -> list[type[BaseModel]]:
    seen: dict[str, type[BaseModel]] = {}

    def visit(annotation: object) -> None:
        for arg in typing.get_args(annotation):
            visit(arg)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation.__name__ not in seen:
            seen[annotation.__name__] = annotation
            for info in annotation.model_fields.values():
                visit(info.annotation)

    visit(PipelineConfig)
    return list(seen.values())


def fields_by_status() -> dict[str, list[tuple[type[BaseModel], str]]]:
    out: dict[str, list[tuple[type[BaseModel], str]]] = {"acts": [], "import_only": [], "planned": []}
    for model in schema_models():
        for name in model.model_fields:
            out[field_status(model, name)[0]].append((model, name))
    return out


def acts_through(model: type[BaseModel], name: str) -> list[str]:
    extra = model.model_fields[name].json_schema_extra
    text = extra.get("acts_through", "") if isinstance(extra, dict) else ""
    return [part.strip() for part in text.split(",") if part.strip()]


def test_every_acting_field_is_read_by_the_engine() -> None:
    unread = [
        f"{model.__name__}.{name}"
        for model, name in fields_by_status()["acts"]
        if name not in engine_names() and not (acts_through(model, name)
                                               and all(n in engine_names() for n in acts_through(model, name)))
    ]
    assert unread == [], f"marked as acting but never read by the engine (wire them or mark them inactive): {unread}"


def test_no_inactive_field_is_read_by_the_engine() -> None:
    acting_names = {name for _, name in fields_by_status()["acts"]}
    read = [
        f"{model.__name__}.{name}"
        for status in ("import_only", "planned")
        for model, name in fields_by_status()[status]
        if name in engine_names(with_topology=False) and name not in SHARED_NAMES and name not in acting_names
    ]
    assert read == [], f"marked inactive but read by the engine (remove the marker): {read}"


def test_the_status_mechanism_is_not_vacuous() -> None:
    by_status = fields_by_status()
    assert len(by_status["acts"]) > 150 and by_status["import_only"] and by_status["planned"]
    assert "min_p" in engine_names() and "no_such_knob_anywhere" not in engine_names()


@pytest.mark.parametrize(("path", "value", "words"), [
    ("l2", 0.1, ["no effect", "weight_decay"]),
    ("actor_train.model_args.ulysses_size", 2, ["not built yet", "Ulysses"]),
    ("actor_train.training_args.num_train_epochs", 3.0, ["no effect", "max_steps"]),
    ("actor_infer.model_update_frequency", 2, ["no effect"]),
])
def test_setting_an_inactive_field_is_a_warning_naming_it(path: str, value: object, words: list[str]) -> None:
    result = validate_config(changed({path: value}))
    assert result.ok, result.errors
    messages = [w.message for w in result.warnings if w.path == path]
    assert len(messages) == 1, result.warnings
    for word in words:
        assert word in messages[0]


def test_an_inactive_field_left_at_its_default_raises_nothing() -> None:
    result = validate_config(changed({"l2": 0.0, "actor_train.training_args.num_train_epochs": 1.0}))
    assert result.ok and result.warnings == []


def test_every_inactive_field_is_documented_with_its_reason() -> None:
    docs = (REPO / "docs" / "config.md").read_text()
    for status in ("import_only", "planned"):
        for model, name in fields_by_status()[status]:
            reason = field_status(model, name)[1]
            assert reason and reason.replace("|", "\\|") in docs, f"{model.__name__}.{name}"
