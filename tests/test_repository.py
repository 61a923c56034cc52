"""House rules of ARCHITECTURE.md that a refactor could silently break."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def requirement_lines(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def test_platform_is_a_source_root_not_a_package() -> None:
    # platform/__init__.py would shadow the standard library's `platform` module (torch, Ray break).
    assert not (REPO_ROOT / "platform" / "__init__.py").exists()


def test_web_requirements_are_a_subset_of_the_full_pins() -> None:
    web = requirement_lines(REPO_ROOT / "requirements-web.txt")
    full = requirement_lines(REPO_ROOT / "requirements.txt")
    assert web <= full, f"requirements-web.txt pins differ from requirements.txt: {sorted(web - full)}"


def test_readme_starts_with_the_run_and_test_commands_and_ci_calls_the_test_command() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    commands = re.findall(r"^\s*(bash scripts/\S+\.sh)", readme, flags=re.MULTILINE)
    assert commands[:2] == ["bash scripts/run.sh", "bash scripts/test.sh"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_trainer_never_imports_the_web_side() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+(django|celery|channels|rest_framework|policylab)\b", re.MULTILINE)
    offenders = [str(p) for p in (REPO_ROOT / "trainer").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
