"""The project installs as a package (pyproject.toml): `python -m build` makes a wheel of the trainer that a
fresh virtualenv installs and runs through its console script from any directory, and the development
environment (scripts/setup.sh: `pip install --no-deps -e .`) runs `python -m trainer` outside the checkout.

The fresh virtualenv gets the wheel alone (`--no-deps --no-index`); its dependencies (torch, transformers,
pydantic, …) come from this environment's site-packages through a `.pth` line, so nothing is downloaded
and the trainer it imports is the wheel's, not the checkout's (a plain path in a .pth file runs none of
that folder's own .pth files, so the editable install's finder stays out)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo_grpo_cpu.yaml"


def clean_env() -> dict[str, str]:
    """This environment without anything that would put the checkout on sys.path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


def run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)


def trainer_sources() -> set[str]:
    """Every file of the trainer package as the checkout has it (what the wheel must hold)."""
    return {p.relative_to(REPO).as_posix() for p in (REPO / "trainer").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build --wheel` of a copy of the project (the build writes build/ and *.egg-info beside
    its pyproject.toml: not in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "trainer", src / "trainer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (setuptools) of this environment, nothing fetched from an index
    built = run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)], cwd=src)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list(dist.glob("policylab-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_holds_the_whole_trainer_package_its_console_script_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert trainer_sources() <= names, sorted(trainer_sources() - names)[:10]
    top_level = {n.split("/")[0] for n in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"trainer"}  # no platform/, tests/, client
    assert "policylab-trainer = trainer.cli:main" in entry_points
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    torch = [line for line in requires if line.split()[1].startswith("torch")]
    # a range a CPU build already installed meets (never an exact pin that makes pip fetch a CUDA build)
    assert torch and all("==" not in line for line in torch), torch
    assert any(line.startswith("Requires-Dist: pydantic") for line in requires)
    assert any("extra == \"ray\"" in line and "ray" in line.split()[1] for line in requires)


def test_a_fresh_virtualenv_installs_the_wheel_and_validates_from_another_directory(
        wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=tmp_path).stdout.strip())
    # the dependencies: this environment's site-packages, after the venv's own (where the wheel goes)
    (site / "zz_policylab_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                     "--disable-pip-version-check", str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copy2(DEMO, work / DEMO.name)
    where = run([str(python), "-c", "import trainer; print(trainer.__file__)"], cwd=work)
    assert Path(where.stdout.strip()).is_relative_to(site), where.stdout + where.stderr  # the wheel's, not REPO's

    script = run([str(venv / "bin" / "policylab-trainer"), "validate", DEMO.name], cwd=work)
    assert script.returncode == 0, script.stdout[-2000:] + script.stderr[-2000:]
    assert script.stdout.startswith(f"{DEMO.name}: OK"), script.stdout
    module = run([str(python), "-m", "trainer", "validate", DEMO.name], cwd=work)
    assert module.returncode == 0, module.stderr[-2000:]
    assert module.stdout == script.stdout


def test_the_development_environment_runs_the_trainer_from_any_directory(tmp_path: Path) -> None:
    """scripts/setup.sh installs the project editable: `python -m trainer` and `policylab-trainer` work
    outside the checkout (they answered "No module named trainer" / did not exist before)."""
    module = run([sys.executable, "-m", "trainer", "validate", str(DEMO)], cwd=tmp_path)
    assert module.returncode == 0, module.stderr[-2000:]
    script = Path(sys.executable).parent / "policylab-trainer"
    assert script.exists(), f"{script}: run `bash scripts/setup.sh` (it installs the project editable)"
    by_script = run([str(script), "validate", str(DEMO)], cwd=tmp_path)
    assert by_script.returncode == 0, by_script.stderr[-2000:]
    assert by_script.stdout == module.stdout
    where = run([sys.executable, "-c", "import trainer; print(trainer.__file__)"], cwd=tmp_path)
    assert Path(where.stdout.strip()) == REPO / "trainer" / "__init__.py"  # editable: it follows the checkout
