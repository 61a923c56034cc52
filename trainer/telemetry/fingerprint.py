"""A run attempt's fingerprint: what it ran with, so that two runs' differences can be listed.

- packages: the installed versions of the libraries the trainer imports (importlib.metadata reads each
  distribution's metadata file: nothing is imported, start-up stays as fast);
- policylab: this checkout's git commit (and whether it has uncommitted changes), else
  $POLICYLAB_COMMIT (an image built without .git);
- hardware: CPU model and count, memory, GPU model, count and driver (nvidia-smi when present), and the
  CUDA runtime of the torch already imported (never imported here);
- config_hash: sha256 of the resolved config's canonical JSON, without the keys that say where the run
  writes and how this attempt starts (two runs of one config share it);
- data: per split, each prompt file's sha256 and size, the synthetic task's parameters, or (agentic runs)
  the environments it plays.

Torch-free and cheap (measured in tests/trainer/telemetry/test_fingerprint.py). Everything it cannot
read is recorded as absent, never an error: a fingerprint must not stop a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# Distributions the trainer imports (directly or as the engine behind an option), by their PyPI names.
PACKAGES: tuple[str, ...] = (
    "torch", "transformers", "tokenizers", "safetensors", "accelerate", "peft", "vllm", "sglang", "deepspeed",
    "megatron-core", "flash-attn", "ray", "numpy", "pydantic", "omegaconf", "redis", "pyarrow", "math-verify",
)
# Keys of the resolved config left out of its hash: where this run writes, how this attempt starts.
UNHASHED_KEYS: tuple[str, ...] = ("output_dir", "logging_dir", "exp_name", "resume_from_checkpoint", "resume_mode",
                                  "checkpoint_config.output_dir")
HASH_CHUNK = 1 << 20


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
    """{distribution: version} of those installed (absent ones are left out)."""
    found: dict[str, str] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def policylab_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    """{"commit": sha, "dirty": bool} of the checkout the trainer runs from; $POLICYLAB_COMMIT without one."""
    if (root / ".git").exists() and shutil.which("git"):
        try:
            commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                    timeout=5, check=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                                   timeout=5).returncode == 1
            return {"commit": commit, "dirty": dirty}
        except (OSError, subprocess.SubprocessError):
            pass
    commit = os.environ.get("POLICYLAB_COMMIT")
    return {"commit": commit} if commit else {}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def gpus() -> dict[str, Any]:
    """GPU models, count and driver from nvidia-smi; {} on a machine without one."""
    if not shutil.which("nvidia-smi"):
        return {}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]
    if not rows:
        return {}
    models = sorted({row[0] for row in rows})
    return {"gpu_model": ", ".join(models), "gpu_count": len(rows), "gpu_driver": rows[0][-1]}


def hardware() -> dict[str, Any]:
    found: dict[str, Any] = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "memory_gb": memory_gb(),
                             "os": f"{platform.system()} {platform.release()}", "python": platform.python_version()}
    found.update(gpus())
    torch = sys.modules.get("torch")  # only when the trainer already imported it
    cuda = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
    if cuda:
        found["cuda"] = cuda
    return {k: v for k, v in found.items() if v is not None}


def canonical_hash(value: Any) -> str:
    """sha256 of the canonical JSON text (sorted keys, no whitespace): experiments.services' spelling."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(config: Mapping[str, Any], unhashed: Sequence[str] = UNHASHED_KEYS) -> str:
    """The hash of a resolved config (a nested dict) without the `unhashed` dotted keys."""
    pruned = json.loads(json.dumps(config, default=str))
    for dotted in unhashed:
        *parents, last = dotted.split(".")
        node: Any = pruned
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return canonical_hash(pruned)


def file_digest(path: Path) -> dict[str, Any]:
    """{"sha256", "bytes"} of one file, read in 1 MiB chunks; {"error"} when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
        return {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc.strerror or exc}"}


def data_source(files: str | Sequence[str] | None, dataset_dir: str | None, synthetic: Mapping[str, Any] | None,
                ) -> dict[str, Any] | None:
    """One split's data: the synthetic task's parameters (and their hash), or each file's digest."""
    if synthetic is not None:
        params = dict(synthetic)
        return {"synthetic": params, "sha256": canonical_hash(params)}
    if not files:
        return None
    names = [files] if isinstance(files, str) else list(files)
    digests = {}
    for name in names:
        path = Path(name)
        if dataset_dir is not None and not path.is_absolute():
            path = Path(dataset_dir) / path
        digests[str(name)] = file_digest(path)
    return {"files": digests}


def environment_source(tags: Sequence[str], envs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """An agentic split's data: the environments it plays (custom_envs of its env manager's tags) and their hash."""
    played = {tag: dict(envs[tag]) for tag in tags if tag in envs}
    return {"environments": played, "sha256": canonical_hash(played)} if played else None


def fingerprint(config: Mapping[str, Any], data: Mapping[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The whole fingerprint of an attempt (see the module docstring); `data`: split -> data_source(...)."""
    return {"packages": package_versions(), "policylab": policylab_commit(), "hardware": hardware(),
            "config_hash": config_hash(config), "data": {k: v for k, v in data.items() if v is not None}}


def flatten(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """{"packages.torch": "2.5.1", "data.train.files.x.jsonl.sha256": "…", …}: one row per fact, what compare
    diffs (a file name may hold dots; its key still reads unambiguously in a table)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for key in sorted(value):
                walk(f"{prefix}.{key}" if prefix else str(key), value[key])
        else:
            out[prefix] = value

    walk("", fingerprint)
    return out
