"""The house explains itself: docs/architecture.md names only files that exist, the layer tests cite it, and
docs/decisions/README.md indexes every decision record (and nothing else)."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
DECISIONS = REPO_ROOT / "docs" / "decisions"

# a repository path in backticks: a top-level folder, then at least one more component
PATH = re.compile(r"`((?:trainer|platform|tests|scripts|bench|docs|examples|frontend)/[\w./-]*\w/?)(?::[\w.:]+)?`")


def cited_paths(text: str) -> set[str]:
    """Every `folder/…` path written in backticks, without a `::test` or `: name` suffix."""
    return {match.group(1).rstrip("/") for match in PATH.finditer(text)}


def test_cited_paths_are_read_from_backticks() -> None:
    text = "see `trainer/config/schema.py`, `tests/test_repository.py::TRAINER_LAYERS` and `docs/x/`; not trainer/y.py"
    assert cited_paths(text) == {"trainer/config/schema.py", "tests/test_repository.py", "docs/x"}


def test_every_path_the_architecture_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    missing = sorted(p for p in cited_paths(text) if "NNNN" not in p and not (REPO_ROOT / p).exists())
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_layer_tests_cite_the_architecture_that_exists() -> None:
    for test in ("tests/test_repository.py", "tests/platform/test_app_layers.py"):
        text = (REPO_ROOT / test).read_text()
        assert "docs/architecture.md" in text, test
        assert "ARCHITECTURE.md" not in text, f"{test} cites a file that is not in the repository"


def test_the_decision_index_lists_every_decision_once() -> None:
    records = sorted(p.name for p in DECISIONS.glob("[0-9][0-9][0-9][0-9]-*.md"))
    index = (DECISIONS / "README.md").read_text()
    linked = re.findall(r"\]\((\d{4}-[\w.-]+\.md)\)", index)
    assert sorted(set(linked) - set(records)) == [], "the index links decisions that do not exist"
    assert sorted(set(records) - set(linked)) == [], "decisions missing from docs/decisions/README.md"
    assert len(linked) == len(set(linked)), "a decision is listed twice"
