"""The config's split into section and check modules (decision 0052) changes nothing a user or the platform sees.

A golden snapshot, taken from the unsplit `schema.py` / `validation.py`, holds the JSON Schema (its properties'
order is the editor's field order), every section model's fields in order, and for every example config, importer
corpus file and foreign-corpus file: what validation says (every issue, in order), what it derives, and a sha256 of
`model_dump(mode="json")` with the keys in the model's order. Regenerate with POLICYLAB_UPDATE_SNAPSHOTS=1 only for a
change that is meant to show (a new field), and say so in review.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from trainer.config import roll_keys, validate_config
from trainer.config.export import config_json_schema
from trainer.config.introspect import sections
from trainer.config.schema import PipelineConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("POLICYLAB_UPDATE_SNAPSHOTS") == "1"
CONFIG_DIRS = ("examples", "tests/trainer/importers/corpus", "tests/fixtures/foreign_corpus")


def config_files() -> list[str]:
    return sorted(str(path.relative_to(REPO_ROOT)) for folder in CONFIG_DIRS
                  for path in (REPO_ROOT / folder).rglob("*.yaml"))


def _sha(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=False, default=str).encode()).hexdigest()


def _plain(text: str) -> str:
    return text.replace(str(REPO_ROOT), "<repo>")


def outcome(relative: str) -> dict[str, Any]:
    logging.disable(logging.WARNING)
    # what an engine key's warning says depends on the engines installed (roll_keys reads vLLM's arguments):
    # the snapshot is taken as if none were, so that it holds on every machine
    try:
        with mock.patch.object(roll_keys, "engine_arguments", lambda engine: None):
            result = validate_config(REPO_ROOT / relative)
    finally:
        logging.disable(logging.NOTSET)
    return {
        "ok": result.ok,
        "format": result.source_format,
        "issues": [_plain(f"{issue.severity}|{issue.kind}|{issue}") for issue in result.issues],
        "derived": _sha(result.derived),
        "dump": None if result.config is None else _sha(result.config.model_dump(mode="json")),
    }


def snapshot() -> dict[str, Any]:
    return {
        "fields": {f"{path or '<top>'}|{model.__name__}": list(model.model_fields) for path, model in sections()},
        "default_dump": _sha(PipelineConfig().model_dump(mode="json")),
        "configs": {name: outcome(name) for name in config_files()},
    }


def _compare(name: str, now: Any) -> None:
    path = GOLDEN / name
    text = json.dumps(now, indent=1, sort_keys=False) + "\n"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with POLICYLAB_UPDATE_SNAPSHOTS=1 on the unsplit code"
    golden = json.loads(path.read_text())
    if isinstance(now, dict) and "configs" in now:
        for key in ("fields", "default_dump"):
            assert now[key] == golden[key], key
        assert sorted(now["configs"]) == sorted(golden["configs"])
        changed = [file for file in now["configs"] if now["configs"][file] != golden["configs"][file]]
        assert changed == [], changed
    assert text == path.read_text()


def test_the_json_schema_is_unchanged_field_order_included() -> None:
    _compare("schema.json", config_json_schema())


@pytest.mark.slow
def test_every_example_and_corpus_file_validates_and_dumps_as_before() -> None:
    _compare("configs.json", snapshot())
