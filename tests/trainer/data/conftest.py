from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.models.loading import load_tokenizer
from trainer.models.tiny import build_tiny_model


@pytest.fixture(scope="session")
def tiny_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_tokenizer(build_tiny_model(tmp_path_factory.mktemp("tiny-tok")))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "fixtures"
