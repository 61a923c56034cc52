"""README's "What is where" table names every room of the house: each top-level package of trainer/ (a folder
with an __init__.py), each app of platform/policylab/ (a folder with an apps.py) and each folder at the top
of the repository that git tracks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def expand(path: str) -> list[str]:
    """`trainer/{models,data}/` -> ["trainer/models/", "trainer/data/"] (one brace group is enough here)."""
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    return [out for choice in match.group(1).split(",")
            for out in expand(path[:match.start()] + choice.strip() + path[match.end():])]


def readme_paths(text: str) -> set[str]:
    """The paths in the first column of the "What is where" table, braces expanded, without a trailing /."""
    section = text.split("## What is where", 1)[1].split("\n## ", 1)[0]
    cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("|")]
    return {p.rstrip("/") for cell in cells for span in re.findall(r"`([^`]+)`", cell) for p in expand(span)}


def rooms(root: Path) -> set[str]:
    trainer = {p.parent.relative_to(root).as_posix() for p in (root / "trainer").glob("*/__init__.py")}
    apps = {p.parent.relative_to(root).as_posix() for p in (root / "platform" / "policylab").glob("*/apps.py")}
    return trainer | apps


def tracked_top_folders(root: Path) -> set[str]:
    try:
        files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return {line.split("/", 1)[0] for line in files.splitlines() if "/" in line and not line.startswith(".")}


def test_readme_names_every_trainer_package_and_platform_app() -> None:
    named = readme_paths((REPO_ROOT / "README.md").read_text())
    assert sorted(rooms(REPO_ROOT) - named) == []


def test_readme_names_every_top_level_folder() -> None:
    named = readme_paths((REPO_ROOT / "README.md").read_text())
    assert sorted(tracked_top_folders(REPO_ROOT) - {p.split("/", 1)[0] for p in named}) == []


def test_the_table_reader_expands_braces_and_sees_a_missing_room(tmp_path: Path) -> None:
    readme = ("# x\n\n## What is where\n\n| path | what |\n| --- | --- |\n| `trainer/{algorithms,data}/` | a |\n"
              "| `platform/policylab/api/` | `not/a/path` in the text column |\n\n## Next\n| `trainer/envs/` | later |\n")
    assert readme_paths(readme) == {"trainer/algorithms", "trainer/data", "platform/policylab/api"}
    for folder in ("trainer/algorithms", "trainer/data", "trainer/envs", "platform/policylab/api"):
        (tmp_path / folder).mkdir(parents=True)
    for package in ("trainer/algorithms", "trainer/data", "trainer/envs"):
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "platform/policylab/api/apps.py").write_text("")
    assert rooms(tmp_path) - readme_paths(readme) == {"trainer/envs"}
