"""House rules of docs/architecture.md that a refactor could silently break."""

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


def first_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A path a -> ... -> a in `graph` (node -> the nodes it imports), or [] where there is none."""
    done: set[str] = set()

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node):], node]
        if node in done:
            return None
        for target in sorted(graph.get(node, ())):
            found = cycle_from(target, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    return next((c for c in (cycle_from(node, []) for node in sorted(graph)) if c), [])


def test_trainer_has_no_import_cycle() -> None:
    assert first_cycle(trainer_import_graph()) == []


# docs/architecture.md's order of trainer packages: a package imports its own layer (no circle) or lower ones.
TRAINER_LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"algorithms", "telemetry"}),
    frozenset({"config"}),
    frozenset({"checkpoint", "cluster", "data", "envs", "models", "rewards", "rollout", "train"}),
    frozenset({"roles"}),
    frozenset({"pipeline"}),
    frozenset({"cli", "__main__"}),
)
# narrower than their layer: algorithms are pure tensor functions; cluster is Ray plumbing that imports
# no role, loop, model or strategy
ONLY_IMPORTS = {"algorithms": frozenset(), "cluster": frozenset({"config"})}


def trainer_package_graph() -> dict[str, set[str]]:
    """trainer package -> the other trainer packages its modules import."""
    def package(module: str) -> str:
        return module.split(".")[1] if "." in module else "trainer"

    graph: dict[str, set[str]] = {}
    for module, imported in trainer_import_graph().items():
        graph.setdefault(package(module), set()).update(package(t) for t in imported)
    return {name: targets - {name} for name, targets in graph.items()}


def package_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    layer = {name: index for index, names in enumerate(TRAINER_LAYERS) for name in names}
    problems = [f"trainer.{name} is in no layer of TRAINER_LAYERS" for name in sorted(set(graph) - set(layer) - {"trainer"})]
    for source, targets in sorted(graph.items()):
        for target in sorted(targets - {"trainer"}):
            if source in ONLY_IMPORTS and target not in ONLY_IMPORTS[source]:
                problems.append(f"trainer.{source} imports trainer.{target}")
            elif source in layer and target in layer and layer[target] > layer[source]:
                problems.append(f"back-arrow: trainer.{source} (layer {layer[source]}) imports trainer.{target} "
                                f"(layer {layer[target]})")
    return problems


def test_trainer_packages_depend_downward_only() -> None:
    graph = trainer_package_graph()
    assert package_layer_violations(graph) == []
    assert first_cycle(graph) == []


def test_the_layer_check_catches_a_back_arrow_and_a_cluster_that_imports_a_role() -> None:
    graph = {"cluster": {"config", "roles"}, "train": {"pipeline"}, "algorithms": {"config"}, "roles": {"train"}}
    assert package_layer_violations(graph) == [
        "trainer.algorithms imports trainer.config",
        "trainer.cluster imports trainer.roles",
        "back-arrow: trainer.train (layer 2) imports trainer.pipeline (layer 4)",
    ]


# docs/architecture.md's order inside trainer.config (decision 0052): the section models, the schema that assembles
# them, topology, the checks of each knob family, the validation that runs them. A module imports its own step
# or lower ones; the sections import nothing of the config but each other and the small tables below; only
# validation runs the checks.
CONFIG_ORDER = ("trainer.config.sections", "trainer.config.schema", "trainer.config.topology",
                "trainer.config.checks", "trainer.config.validation")
SECTIONS_MAY_IMPORT = frozenset({"trainer.config.device_mapping", "trainer.config.registries",
                                 "trainer.telemetry.events"})


def config_order_violations(graph: dict[str, set[str]]) -> list[str]:
    def step(module: str) -> int | None:
        return next((i for i, p in enumerate(CONFIG_ORDER) if module == p or module.startswith(p + ".")), None)

    problems = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = step(source), step(target)
            if low is not None and high is not None and high > low:
                problems.append(f"back-arrow: {source} imports {target}")
            elif low == 0 and high != 0 and target not in SECTIONS_MAY_IMPORT:
                problems.append(f"{source} imports {target}: a section imports only sections and "
                                f"{', '.join(sorted(SECTIONS_MAY_IMPORT))}")
            elif high == 3 and low not in (3, 4):
                problems.append(f"{source} imports {target}: only trainer.config.validation runs the checks")
    return problems


def test_config_sections_and_checks_keep_their_place() -> None:
    graph = trainer_import_graph()
    assert any(m.startswith("trainer.config.sections.") for m in graph)
    assert any(m.startswith("trainer.config.checks.") for m in graph)
    assert config_order_violations(graph) == []


def test_the_config_order_check_catches_a_back_arrow_a_section_reaching_up_and_a_stray_check_caller() -> None:
    graph = {"trainer.config.sections.loss": {"trainer.config.sections.base", "trainer.config.loading"},
             "trainer.config.topology": {"trainer.config.checks.loss", "trainer.config.schema"},
             "trainer.config.export": {"trainer.config.checks.common"},
             "trainer.config.checks.loss": {"trainer.config.topology", "trainer.config.sections.loss"}}
    assert config_order_violations(graph) == [
        "trainer.config.export imports trainer.config.checks.common: only trainer.config.validation runs the checks",
        "trainer.config.sections.loss imports trainer.config.loading: a section imports only sections and "
        "trainer.config.device_mapping, trainer.config.registries, trainer.telemetry.events",
        "back-arrow: trainer.config.topology imports trainer.config.checks.loss",
    ]


# docs/architecture.md, decision 0057: trainer/pipeline/run/ is the run infrastructure around the loops (ledger,
# resume report, watchdog, health, telemetry, profiling, tiny models). The loops and the runner import it; it
# imports nothing else of trainer.pipeline (not rlvr, agentic, learner, the rollout producer or the runner).
RUN_INFRASTRUCTURE = "trainer.pipeline.run"


def run_infrastructure_violations(graph: dict[str, set[str]]) -> list[str]:
    def inside(module: str) -> bool:
        return module == RUN_INFRASTRUCTURE or module.startswith(RUN_INFRASTRUCTURE + ".")

    return [f"{source} imports {target}: {RUN_INFRASTRUCTURE} never imports the loops"
            for source, targets in sorted(graph.items()) if inside(source)
            for target in sorted(targets)
            if (target == "trainer.pipeline" or target.startswith("trainer.pipeline.")) and not inside(target)]


def test_run_infrastructure_never_imports_the_loops() -> None:
    graph = trainer_import_graph()
    assert {f"{RUN_INFRASTRUCTURE}.{name}" for name in ("ledger", "watchdog", "health", "telemetry")} <= set(graph)
    assert run_infrastructure_violations(graph) == []


def test_the_run_infrastructure_check_catches_an_import_of_a_loop() -> None:
    graph = {"trainer.pipeline.run.health": {"trainer.pipeline.rlvr", "trainer.pipeline.run.ledger",
                                             "trainer.config.schema"},
             "trainer.pipeline.run.ledger": {"trainer.pipeline.learner"},
             "trainer.pipeline.rlvr": {"trainer.pipeline.run.ledger", "trainer.pipeline.learner"}}
    assert run_infrastructure_violations(graph) == [
        "trainer.pipeline.run.health imports trainer.pipeline.rlvr: trainer.pipeline.run never imports the loops",
        "trainer.pipeline.run.ledger imports trainer.pipeline.learner: trainer.pipeline.run never imports the loops",
    ]


def test_the_loop_calls_roles_by_method_not_by_name() -> None:
    """Worker-group calls in the trainer name the role Protocol's method, which a reader can follow."""
    by_name = re.compile(r"\.call_(all|all_deferred|sharded|rank0)\(\s*[\"']")
    offenders = [f"{path.relative_to(REPO_ROOT)}:{n}" for path in (REPO_ROOT / "trainer").rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), start=1) if by_name.search(line)]
    assert offenders == []


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


def test_test_files_have_unique_names() -> None:
    """Test folders are not packages, so pytest imports each test file by its basename: two files of one name
    (tests/e2e/x.py, tests/platform/x.py) stop the collection of the whole suite."""
    names = [path.name for path in (REPO_ROOT / "tests").rglob("test_*.py")]
    assert sorted({name for name in names if names.count(name) > 1}) == []
