"""Which files a run may touch: it reads models and data under the deployment's read roots, and
reads and writes only inside its own run directory.

The schema marks every file-system field with `path="read"` or `path="write"` (schema.fld). On the
platform a config is checked twice against a PathPolicy:
- before launch, on the web side (`check_confinement`, no file-system access, so an answer never
  tells whether another team's file exists);
- in the trainer process, after `${oc.env:…}` is substituted (`on_disk=True`, symlinks resolved),
  with the policy the supervisor passes in POLICYLAB_READ_ROOTS.
`rebase_paths` makes relative paths absolute (reads against the base directory, writes inside the
run directory), so the trainer never depends on its working directory.
The CLI on one's own machine has no policy: everything is allowed there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from trainer.config.issues import ConfigIssue
from trainer.config.schema import PipelineConfig

READ_ROOTS_VAR = "POLICYLAB_READ_ROOTS"  # os.pathsep-separated absolute folders
GENERATED_SCHEMES = ("tiny://",)  # built inside the run directory, nothing is read
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")  # org/name, looked up in the local HF cache
# Fields the supervisor sets itself for every attempt (the run directory, the resume checkpoint).
PLATFORM_SET = frozenset({"output_dir", "logging_dir", "checkpoint_config.output_dir", "resume_from_checkpoint"})
# tracker_kwargs is free-form: these keys name folders the tracker writes.
TRACKER_DIR_KEYS = re.compile(r"^(log_?dir|dir|save_dir|.*_dir|.*_path)$")
# system_envs must not change how the worker's interpreter, loader or the platform itself behave.
RESERVED_ENV = re.compile(r"^(LD_.*|PYTHON.*|PATH|HOME|POLICYLAB_.*|RAY_.*|CUDA_VISIBLE_DEVICES|DYLD_.*)$")


@dataclass(frozen=True)
class PathPolicy:
    read_roots: tuple[str, ...]  # absolute folders models and data may come from
    base_dir: str  # relative read paths are resolved here
    run_dir: str | None = None  # the run's own folder; None before launch (web-side checks)

    @classmethod
    def from_env(cls, run_dir: str) -> PathPolicy | None:
        """The policy the supervisor passed to this trainer process, or None (CLI use)."""
        roots = os.environ.get(READ_ROOTS_VAR)
        if roots is None:
            return None
        return cls(tuple(r for r in roots.split(os.pathsep) if r), os.getcwd(), run_dir)


def path_fields(config: PipelineConfig) -> Iterator[tuple[str, str, str]]:
    """(dotted field path, value, "read" | "write") for every file-system value set in `config`."""
    yield from _walk(config, "")
    for key, value in config.tracker_kwargs.items():
        if isinstance(value, str) and TRACKER_DIR_KEYS.match(str(key)):
            yield f"tracker_kwargs.{key}", value, "write"


def _walk(model: BaseModel, prefix: str) -> Iterator[tuple[str, str, str]]:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        dotted = f"{prefix}{name}"
        access = (info.json_schema_extra or {}).get("path") if isinstance(info.json_schema_extra, dict) else None
        if access is not None:
            for index, item in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(item, str):
                    yield (f"{dotted}.{index}" if isinstance(value, list) else dotted), item, str(access)
        elif isinstance(value, BaseModel):
            yield from _walk(value, f"{dotted}.")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(item, BaseModel):
                    yield from _walk(item, f"{dotted}.{key}.")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _data_dir(config: PipelineConfig, field: str) -> str | None:
    """data_args.dataset_dir of the section holding `field`, which relative file names start from."""
    if ".data_args.file_name" not in field and ".data_args.eval_file_name" not in field:
        return None
    node: Any = config
    for part in field.split(".data_args.")[0].split("."):
        node = node[part] if isinstance(node, Mapping) else getattr(node, part)
    return node.data_args.dataset_dir


def _read_base(config: PipelineConfig, field: str, policy: PathPolicy) -> str:
    data_dir = _data_dir(config, field)
    return os.path.join(policy.base_dir, data_dir) if data_dir else policy.base_dir


def resolve_read(value: str, base_dir: str, on_disk: bool) -> str:
    path = os.path.join(base_dir, os.path.expanduser(value) if on_disk else value)
    return os.path.realpath(path) if on_disk else os.path.normpath(path)


def check_confinement(config: PipelineConfig, policy: PathPolicy, *, on_disk: bool = False) -> list[ConfigIssue]:
    """An error, by field, for every path outside what `policy` allows, and for reserved system_envs."""
    issues = []
    roots = [os.path.realpath(r) if on_disk else os.path.normpath(r) for r in policy.read_roots]
    readable = [*roots, *([policy.run_dir] if policy.run_dir else [])]
    where = ", ".join(policy.read_roots) or "(none configured)"
    for field, value, access in path_fields(config):
        if field in PLATFORM_SET or "${oc.env:" in value:
            continue  # set by the platform / checked by the trainer once the variable is substituted
        if value.startswith(GENERATED_SCHEMES):
            continue
        if access == "write":
            issue = _write_issue(value, policy, on_disk)
            if issue:
                issues.append(ConfigIssue(field, issue))
            continue
        if "://" in value:
            issues.append(ConfigIssue(field, f"{value!r}: only local paths and {', '.join(GENERATED_SCHEMES)} are read"))
            continue
        resolved = resolve_read(value, _read_base(config, field, policy), on_disk)
        if any(_within(resolved, root) for root in readable):
            continue
        is_model = field.endswith("model_name_or_path") or field in ("pretrain", "reward_pretrain")
        if is_model and HUB_ID.match(value) and not (on_disk and os.path.exists(resolved)):
            continue  # a hub id, loaded from the local HF cache only (local_files_only=True)
        issues.append(ConfigIssue(
            field, f"{value!r} is outside the folders runs may read: {where} (and the run's own directory)"
        ))
    for role_path, envs in _system_envs(config):
        for name in envs:
            if RESERVED_ENV.match(name):
                issues.append(ConfigIssue(f"{role_path}.{name}", f"{name} cannot be set from a config on the platform"))
    return issues


def _write_issue(value: str, policy: PathPolicy, on_disk: bool) -> str | None:
    inside = "must be a folder inside the run directory, written relative to it (e.g. profiles/)"
    if os.path.isabs(os.path.expanduser(value)):
        if policy.run_dir is None:
            return f"{value!r} {inside}"
        target = os.path.realpath(value) if on_disk else os.path.normpath(value)
        run_dir = os.path.realpath(policy.run_dir) if on_disk else os.path.normpath(policy.run_dir)
        return None if _within(target, run_dir) else f"{value!r} {inside}"
    if os.path.normpath(value).split(os.sep)[0] == ".." or value.startswith("~"):
        return f"{value!r} {inside}"
    return None


def _system_envs(config: PipelineConfig) -> Iterator[tuple[str, Mapping[str, str]]]:
    yield "system_envs", config.system_envs
    for role in ("actor_train", "actor_infer", "reference", "critic", "validation"):
        worker = getattr(config, role, None)
        if worker is not None:
            yield f"{role}.system_envs", worker.system_envs
    for name, reward in config.rewards.items():
        yield f"rewards.{name}.system_envs", reward.system_envs


def rebase_paths(raw: dict[str, Any], config: PipelineConfig, policy: PathPolicy) -> dict[str, Any]:
    """`raw` (the native config dict) with relative read paths made absolute against base_dir and
    relative write paths placed inside the run directory."""
    assert policy.run_dir is not None
    roots = [os.path.normpath(r) for r in policy.read_roots]
    for field, value, access in path_fields(config):
        if field in PLATFORM_SET or value.startswith(GENERATED_SCHEMES) or "${oc.env:" in value:
            continue
        if os.path.isabs(value) or "://" in value or (access == "read" and _data_dir(config, field)):
            continue  # absolute already, or relative to its own (rebased) dataset_dir
        if access == "write":
            _set(raw, field, os.path.normpath(os.path.join(policy.run_dir, value)))
            continue
        resolved = resolve_read(value, policy.base_dir, on_disk=False)
        if any(_within(resolved, root) for root in roots):  # else a hub id, kept as written
            _set(raw, field, resolved)
    return raw


def _set(raw: dict[str, Any], field: str, value: str) -> None:
    parts = field.split(".")
    node: Any = raw
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value
