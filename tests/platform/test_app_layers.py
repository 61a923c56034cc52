"""Platform apps depend one way: accounts → experiments → jobs / tracking → api (docs/architecture.md). A lower app
reaches a higher one through a signal or an on-commit hook the higher app connects (experiments.signals), never
an import; jobs may import tracking (it stores the Ray driver's output as tracking's log lines), tracking never
imports jobs. See docs/decisions/0028-platform-apps-depend-one-way.md.

Imports are read with `ast`, at module level and inside functions alike (a function-level import only hides a
circle), relative ones included. policylab's top-level modules (settings, urls, asgi, middleware, …) may import
any app; an app that imports one of them is charged with what that module imports."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "policylab"
LAYER = {"accounts": 0, "experiments": 1, "jobs": 2, "tracking": 2, "api": 3}
ALSO_ALLOWED = {("jobs", "tracking")}  # the one edge between the two apps of the same layer


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def imported_modules(path: Path, name: str, modules: set[str]) -> set[str]:
    """The policylab modules `path` (module `name`) imports, anywhere in it."""
    is_package = path.name == "__init__.py"

    def known(dotted: str) -> str:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from policylab import tracking` imports the package tracking, not policylab
            found |= {known(f"{module}.{alias.name}") or known(module) for alias in node.names}
    return found - {"", name}


def app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYER else None


def app_imports(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(importing app, imported app) -> the import chains that make the edge, e.g.
    ["policylab.experiments.services", "policylab.jobs.services"]. A chain passes through policylab's own
    top-level modules, never through a third app (that app's imports are edges of their own)."""
    paths = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {name: imported_modules(path, name, set(paths)) for name, path in paths.items()}
    edges: dict[tuple[str, str], list[str]] = {}
    for start in sorted(graph):
        source = app_of(start)
        if source is None:
            continue
        stack, seen = [[start]], {start}
        while stack:
            chain = stack.pop()
            for module in sorted(graph[chain[-1]]):
                target = app_of(module)
                if target == source or module in seen or not module.startswith(f"{package.name}."):
                    continue
                seen.add(module)
                if target is None:  # a top-level module of policylab: follow what it imports
                    stack.append([*chain, module])
                else:
                    edges.setdefault((source, target), []).append(" -> ".join([*chain, module]))
    return edges


def circle(edges: set[tuple[str, str]]) -> list[str] | None:
    """An import circle between apps, as [a, b, …, a], or None."""
    following: dict[str, set[str]] = {}
    for source, target in edges:
        following.setdefault(source, set()).add(target)

    def walk(app: str, path: list[str]) -> list[str] | None:
        if app in path:
            return [*path[path.index(app):], app]
        for nxt in sorted(following.get(app, ())):
            found = walk(nxt, [*path, app])
            if found:
                return found
        return None

    for app in sorted(following):
        found = walk(app, [])
        if found:
            return found
    return None


def back_arrows(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    return [
        f"{source} imports {target}: {chains[0]}"
        for (source, target), chains in sorted(edges.items())
        if LAYER[source] <= LAYER[target] and (source, target) not in ALSO_ALLOWED
    ]


def test_platform_apps_have_no_import_circle() -> None:
    found = circle(set(app_imports()))
    assert found is None, "import circle between platform apps: " + " -> ".join(found)


def test_platform_apps_import_only_the_apps_below_them() -> None:
    assert back_arrows(app_imports()) == []


def test_every_rest_endpoint_is_served_by_the_api_app() -> None:
    """Every route under /api/ and every DRF view of policylab is a view of the api app (whatever namespace
    its name is in: a run's tracking endpoints keep "tracking:api-…")."""
    from django.urls import get_resolver

    def routes(patterns, prefix=""):
        for pattern in patterns:
            if hasattr(pattern, "url_patterns"):
                yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern), pattern.callback

    found = [(route, getattr(view, "cls", view).__module__, hasattr(view, "cls"))
             for route, view in routes(get_resolver().url_patterns)]
    outside = [f"{route} ({module})" for route, module, is_rest in found
               if (is_rest or route.startswith("api/")) and module.startswith("policylab.")
               and not module.startswith("policylab.api.")]
    assert outside == []
    assert sum(module.startswith("policylab.api.") for _, module, _ in found) >= 20  # the walk found them


def test_every_app_is_in_the_layers() -> None:
    apps = {p.parent.name for p in PACKAGE.glob("*/apps.py")}
    assert apps == set(LAYER), "a new app needs its place in LAYER (and in docs/architecture.md's order)"


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checker_sees_function_level_relative_and_indirect_imports(tmp_path: Path) -> None:
    """The two circles this test was written against (issue 32), in miniature: a function-level import of
    tracking in experiments, and jobs importing experiments back through a relative import; plus a back-arrow
    through a top-level module of the package."""
    package = tmp_path / "policylab"
    for app in LAYER:
        write(package, f"{app}/__init__.py", "")
    write(package, "__init__.py", "")
    write(package, "redaction.py", "from policylab.api import errors\n")
    write(package, "api/errors.py", "")
    write(package, "experiments/run_state.py",
          "def publish(run_id):\n    from policylab.tracking.ingest import publish_run_state\n")
    write(package, "experiments/services.py", "from policylab import jobs\nfrom ..redaction import x\n")
    write(package, "tracking/ingest.py", "from policylab.experiments.run_state import write_run_state\n")
    write(package, "jobs/supervisor.py", "from ..experiments.services import path_policy\n")
    write(package, "accounts/models.py", "import policylab.redaction\n")

    edges = app_imports(package)
    assert set(edges) == {("experiments", "tracking"), ("experiments", "jobs"), ("experiments", "api"),
                          ("tracking", "experiments"), ("jobs", "experiments"), ("accounts", "api")}
    assert circle(set(edges)) in (["experiments", "jobs", "experiments"], ["experiments", "tracking", "experiments"])
    assert [arrow.split(":")[0] for arrow in back_arrows(edges)] == [
        "accounts imports api", "experiments imports api", "experiments imports jobs", "experiments imports tracking"]
    assert edges[("accounts", "api")] == [
        "policylab.accounts.models -> policylab.redaction -> policylab.api.errors"]
