"""House rules of ARCHITECTURE.md that a refactor could silently break."""

from __future__ import annotations

import ast
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


def trainer_import_graph() -> dict[str, set[str]]:
    """Module -> trainer modules it imports (module-level and inside functions alike: a function-level
    import only hides a cycle, it does not break it)."""
    modules = {}
    for path in (REPO_ROOT / "trainer").rglob("*.py"):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path

    def target(dotted: str) -> str:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainer"):
                found = {target(f"{node.module}.{alias.name}") for alias in node.names}
            elif isinstance(node, ast.Import):
                found = {target(alias.name) for alias in node.names if alias.name.startswith("trainer")}
            else:
                continue
            graph[name] |= found - {name, ""}
    return graph


def test_trainer_has_no_import_cycle() -> None:
    graph = trainer_import_graph()
    done: set[str] = set()

    def cycle_from(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = cycle_from(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    cycles = [c for c in (cycle_from(m, []) for m in sorted(graph)) if c]
    assert cycles == [], " -> ".join(cycles[0])


def test_batch_arithmetic_lives_only_in_the_topology_module() -> None:
    """Global batch, mini-batch rows and optimizer steps are computed by trainer/config/topology.py."""
    arithmetic = re.compile(r"(per_device_train_batch_size|gradient_accumulation_steps)\s*\*|"
                            r"rollout_batch_size\s*\*\s*\w*\.?num_return_sequences_in_group")
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for path in (REPO_ROOT / "trainer").rglob("*.py")
        if path.name != "topology.py" and "importers" not in path.parts  # importers translate foreign keys
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if arithmetic.search(line)
    ]
    assert offenders == []
