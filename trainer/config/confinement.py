"""Which files a run may touch: it reads models and data under the deployment's read roots, and
reads and writes only inside its own run directory; and which environment variables it may set.

The schema marks every file-system field with `path="read"` or `path="write"` (schema.fld), and the
free-form `tracker_kwargs` name their folders by key (TRACKER_PATH_KEYS). `locate` is the one
function that decides what any such value points at — a plain path (made absolute and confined), a
`tiny://<size>` model built inside the run directory, a hub id, or a URL under a prefix the
deployment allows — or refuses it (PathRefused, saying what would be valid). Every other scheme
(`file:`, `s3://`, `http://`, …) is refused: an engine or a tracker would open it as it pleases.

On the platform a config is checked three times against a PathPolicy:
- before launch, on the web side (`check_confinement`, no file-system access, so an answer never
  tells whether another team's file exists);
- by the supervisor, which then writes the attempt's config with every path made absolute
  (`rebase_paths`), so the trainer never depends on its working directory;
- in the trainer process, after `${oc.env:…}` is substituted (`on_disk=True`, symlinks resolved),
  with the policy the supervisor passes in its environment (PathPolicy.from_env), before any file
  is opened.
The CLI on one's own machine has no policy: everything is allowed there, except a `tiny://`
reference that is not a plain size name, which validation and the trainer refuse everywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel

from trainer.config.issues import ConfigIssue
from trainer.config.schema import PathAccess, PipelineConfig
from trainer.config.topology import WORKER_ROLES

# What the supervisor passes to the trainer (comma-separated, except the roots: os.pathsep).
READ_ROOTS_VAR = "POLICYLAB_READ_ROOTS"  # absolute folders models and data may come from
URL_PREFIXES_VAR = "POLICYLAB_URL_PREFIXES"  # e.g. "s3://team-bucket/,gs://shared-data/"
SYSTEM_ENVS_ALLOW_VAR = "POLICYLAB_SYSTEM_ENVS_ALLOW"  # names or globs added to SYSTEM_ENVS_ALLOWED

TINY_SCHEME = "tiny://"
GENERATED_SCHEMES = (TINY_SCHEME,)  # built inside the run directory, nothing is read
URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")  # file:, s3:, hdfs:, http:, simplecache::s3:, …
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")  # org/name, looked up in the local HF cache
MODEL_FIELDS = ("pretrain", "reward_pretrain")  # and every *.model_name_or_path
# Fields the supervisor sets itself for every attempt (the run directory, the resume checkpoint).
PLATFORM_SET = frozenset({"output_dir", "logging_dir", "checkpoint_config.output_dir", "resume_from_checkpoint"})
# tracker_kwargs are free-form (wandb.init and swanlab.init take them, nested `settings` too): these
# keys name a folder or file the tracker writes (log_dir, dir, logdir, root_dir, …) or reads (load).
TRACKER_PATH_KEYS = re.compile(r"^(log_?dir|dir|.*_dir|.*_path|.*_file)$")
TRACKER_READ_KEYS = frozenset({"load"})  # swanlab.init(load=) reads its arguments from a file

# system_envs is an allow-list. These are the knobs RL configs set in their workers (ROLL's examples,
# verl's runtime_env): exact names, or families as globs…
SYSTEM_ENVS_ALLOWED = (
    "NCCL_*", "CUDA_*", "TORCH_*", "TORCHINDUCTOR_*", "PYTORCH_*", "VLLM_*", "NVTE_*", "WANDB_*", "SWANLAB_*",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    "TRANSFORMERS_VERBOSITY", "TRANSFORMERS_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
    "RAY_DEDUP_LOGS", "RAY_COLOR_PREFIX", "USE_MODELSCOPE",
)
# …but a family never admits a variable that names a location, an address, or code or data to load
# (NCCL_* admits NCCL_DEBUG, not NCCL_DEBUG_FILE or NCCL_NET_PLUGIN): it could read or write outside the
# run directory, reach another host or run a library. A deployment may still allow one by its exact name.
LOCATION_WORDS = re.compile(
    r"(^|_)(DIR|DIRECTORY|PATH|FILE|HOME|ROOT|CACHE|URL|URI|ENDPOINT|PROXY|HOST|IP|PORT|ADDR|ADDRESS|PLUGINS?|"
    r"LIB|LIBRARY|PRELOAD|CERTS?|BUNDLE|LOCATION|MODELSCOPE|INSECURE)(_|$)"
)
# Never, whatever a deployment allows: what the interpreter, the dynamic loader, the shell, Ray's worker
# placement and the platform itself read; RAY_AUTH_* is the cluster's credential (decision 0047).
RESERVED_ENV = re.compile(r"^(LD_.*|DYLD_.*|PYTHON.*|PATH|HOME|BASH_ENV|ENV|POLICYLAB_.*|CUDA_VISIBLE_DEVICES|RAY_AUTH_.*)$")


class PathRefused(ValueError):
    """A value a run may not use as a path; the message says why and what would be valid."""


@dataclass(frozen=True)
class PathPolicy:
    read_roots: tuple[str, ...]  # absolute folders models and data may come from
    base_dir: str  # relative read paths are resolved here
    run_dir: str | None = None  # the run's own folder; None before launch (web-side checks)
    url_prefixes: tuple[str, ...] = ()  # remote locations the deployment allows, e.g. "s3://team-bucket/"
    env_allow: tuple[str, ...] = ()  # system_envs names or globs allowed beyond SYSTEM_ENVS_ALLOWED

    @classmethod
    def from_env(cls, run_dir: str) -> PathPolicy | None:
        """The policy the supervisor passed to this trainer process, or None (CLI use)."""
        roots = os.environ.get(READ_ROOTS_VAR)
        if roots is None:
            return None
        return cls(tuple(r for r in roots.split(os.pathsep) if r), os.getcwd(), run_dir,
                   split_list(os.environ.get(URL_PREFIXES_VAR, "")), split_list(os.environ.get(SYSTEM_ENVS_ALLOW_VAR, "")))


def split_list(text: str) -> tuple[str, ...]:
    """"a, b,,c" -> ("a", "b", "c"): the form of the comma-separated settings above."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def url_prefixes(prefixes: Sequence[str]) -> tuple[str, ...]:
    """Each prefix ending in "/", so that s3://bucket never admits s3://bucket-of-another-team."""
    return tuple(p if p.endswith("/") else f"{p}/" for p in prefixes)


# ---------------------------------------------------------------------------------------------
# tiny:// models


def parse_tiny_ref(ref: str) -> tuple[str, int]:
    """``tiny://small?seed=3`` -> ("small", 3). ValueError, naming the valid sizes, for anything else:
    the name becomes a folder of the run directory, so it must be a plain size name (never a path)."""
    from trainer.config.tiny_shapes import SIZES

    parts = urlsplit(ref)
    size = parts.netloc or "tiny"
    if parts.scheme != "tiny" or parts.path not in ("", "/") or parts.fragment or size not in SIZES:
        raise ValueError(f"{ref!r}: a built-in model is tiny://<size>[?seed=<n>] with a size of {', '.join(SIZES)}")
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - {"seed"})
    if unknown:
        raise ValueError(f"{ref!r}: unknown option(s) {unknown}; valid: seed")
    try:
        (seed,) = (int(value) for value in query.get("seed", ["0"]))
    except ValueError as exc:
        raise ValueError(f"{ref!r}: seed must be one integer") from exc
    return size, seed


def check_tiny(value: str, model: bool) -> str:
    """`value` when it is a built-in model a model field may name; PathRefused otherwise."""
    if not model:
        raise PathRefused(f"{value!r}: tiny://<size> names a built-in model; only model fields accept it")
    try:
        parse_tiny_ref(value)
    except ValueError as exc:
        raise PathRefused(str(exc)) from None
    return value


def tiny_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """Validation's rule, with or without a platform: every tiny:// reference is a plain size name in a
    model field (`tiny:///../../run-3/models/tiny` would reuse another run's model folder)."""
    issues = []
    for field, value, _ in path_fields(config):
        if isinstance(value, str) and value.startswith(TINY_SCHEME):
            try:
                check_tiny(value, is_model_field(field))
            except PathRefused as refusal:
                issues.append(ConfigIssue(field, str(refusal)))
    return issues


# ---------------------------------------------------------------------------------------------
# the one decision about a path value


# A custom env's data file (ROLL's GEM dataset environments, trainer.envs.gem_data): a read path, or a Hugging Face
# dataset id found in the local cache, as a model id is
ENV_DATASET_KEY = "dataset_name"


def is_model_field(field: str) -> bool:
    """A field whose value may be a hub id (org/name, from the local HF cache) instead of a path."""
    return field.endswith(("model_name_or_path", f".env_config.{ENV_DATASET_KEY}")) or field in MODEL_FIELDS


def locate(value: Any, access: PathAccess, policy: PathPolicy, *, base_dir: str, model: bool = False,
           on_disk: bool = False) -> str:
    """What a path field's (interpolated) value points at, as the trainer will open it:

    - a plain path: its absolute, normalised form (symlinks resolved `on_disk`), which must lie inside the
      run directory (writes; relative paths are taken from it), or under a read root or the run directory
      (reads; relative paths are taken from `base_dir`);
    - `tiny://<size>[?seed=<n>]` in a model field, or an `org/name` hub id that is not a readable folder:
      the value itself (built inside the run directory / loaded from the local HF cache only);
    - a URL under one of `policy.url_prefixes`: the value itself.
    Anything else raises PathRefused: every other scheme, `~`, `..` out of the run directory, text that
    is not a path."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise PathRefused(f"{value!r} is not a path: write a folder or file name as text")
    scheme = URL_SCHEME.match(value)
    if value.startswith(TINY_SCHEME):
        return check_tiny(value, model)
    if scheme:
        return _remote(value, scheme.group(1), access, policy)
    if access == "write":
        return _write_target(value, policy, on_disk)
    resolved = resolve_read(value, base_dir, on_disk)
    if any(_within(resolved, root) for root in _readable(policy, on_disk)):
        return resolved
    if model and HUB_ID.match(value) and not (on_disk and os.path.exists(resolved)):
        return value  # a hub id, loaded from the local HF cache only (local_files_only=True)
    where = ", ".join(policy.read_roots) or "(none configured)"
    raise PathRefused(f"{value!r} is outside the folders runs may read: {where} (and the run's own directory)")


def _remote(value: str, scheme: str, access: PathAccess, policy: PathPolicy) -> str:
    prefixes = url_prefixes(policy.url_prefixes)
    allowed = [p for p in prefixes if value.startswith(p)]
    if allowed and ".." not in value[len(allowed[0]):].split("/"):
        return value
    if access == "write":
        local = "a folder inside the run directory, written relative to it (e.g. profiles/)"
    else:
        local = f"a path under {', '.join(policy.read_roots) or '(no read root configured)'}"
    remote = (f"or a URL under {', '.join(prefixes)}" if prefixes
              else f"this deployment allows no URLs ({URL_PREFIXES_VAR} names the buckets it allows)")
    raise PathRefused(f"{value!r} is a {scheme}: URL; use {local}, {remote}")


def _write_target(value: str, policy: PathPolicy, on_disk: bool) -> str:
    inside = f"{value!r} must be a folder inside the run directory, written relative to it (e.g. profiles/)"
    if value.startswith("~"):
        raise PathRefused(inside)
    if os.path.isabs(value):
        if policy.run_dir is None:
            raise PathRefused(inside)
        target = value
    else:
        if os.path.normpath(value).split(os.sep)[0] == "..":
            raise PathRefused(inside)
        if policy.run_dir is None:
            return os.path.normpath(value)  # before launch: relative, and it stays inside
        target = os.path.join(policy.run_dir, value)
    target = os.path.realpath(target) if on_disk else os.path.normpath(target)
    run_dir = os.path.realpath(policy.run_dir) if on_disk else os.path.normpath(policy.run_dir)
    if not _within(target, run_dir):
        raise PathRefused(inside)
    return target


def _readable(policy: PathPolicy, on_disk: bool) -> list[str]:
    roots = [os.path.realpath(r) if on_disk else os.path.normpath(r) for r in policy.read_roots]
    return [*roots, *([policy.run_dir] if policy.run_dir else [])]


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve_read(value: str, base_dir: str, on_disk: bool) -> str:
    path = os.path.join(base_dir, os.path.expanduser(value) if on_disk else value)
    return os.path.realpath(path) if on_disk else os.path.normpath(path)


# ---------------------------------------------------------------------------------------------
# every path of a config


def path_fields(config: PipelineConfig) -> Iterator[tuple[str, Any, str]]:
    """(dotted field path, value, "read" | "write") for every file-system value set in `config`.
    Schema fields hold text; a tracker kwarg under a path key may hold anything (and is refused then)."""
    yield from _walk(config, "")
    yield from _tracker_paths(config.tracker_kwargs, "tracker_kwargs")
    for tag, spec in config.custom_envs.items():  # env_config is free-form: its one path key is named here
        value = spec.env_config.get(ENV_DATASET_KEY)
        if value is not None:
            yield f"custom_envs.{tag}.env_config.{ENV_DATASET_KEY}", value, "read"


def _tracker_paths(kwargs: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any, str]]:
    for key, value in kwargs.items():
        dotted = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            yield from _tracker_paths(value, dotted)
        elif value is not None and str(key) in TRACKER_READ_KEYS:
            yield dotted, value, "read"
        elif value is not None and TRACKER_PATH_KEYS.match(str(key)):
            yield dotted, value, "write"


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


def _exempt(field: str, value: Any) -> bool:
    """Set by the platform, or read from the environment (checked by the trainer once substituted)."""
    return field in PLATFORM_SET or (isinstance(value, str) and "${oc.env:" in value)


def confined_paths(config: PipelineConfig, policy: PathPolicy, *,
                   on_disk: bool = False) -> Iterator[tuple[str, Any, str | PathRefused]]:
    """(field, value, where it points or why it is refused) for every path of `config` the policy governs."""
    for field, value, access in path_fields(config):
        if _exempt(field, value):
            continue
        try:
            target: str | PathRefused = locate(value, access, policy, base_dir=_read_base(config, field, policy),
                                               model=is_model_field(field), on_disk=on_disk)
        except PathRefused as refusal:
            target = refusal
        yield field, value, target


def check_confinement(config: PipelineConfig, policy: PathPolicy, *, on_disk: bool = False) -> list[ConfigIssue]:
    """An error, by field, for every path outside what `policy` allows, and for every system_envs
    variable it does not allow."""
    issues = [ConfigIssue(field, str(target)) for field, _, target in confined_paths(config, policy, on_disk=on_disk)
              if isinstance(target, PathRefused)]
    for role_path, envs in _system_envs(config):
        for name in envs:
            refusal = env_refusal(name, policy.env_allow)
            if refusal:
                issues.append(ConfigIssue(f"{role_path}.{name}", refusal))
    return issues


def rebase_paths(raw: dict[str, Any], config: PipelineConfig, policy: PathPolicy) -> dict[str, Any]:
    """`raw` (the native config dict) with every local path made absolute: reads against base_dir
    (or their dataset_dir), writes inside the run directory."""
    assert policy.run_dir is not None
    for field, value, target in confined_paths(config, policy):
        if isinstance(target, str) and target != value:
            _set(raw, field, target)
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


# ---------------------------------------------------------------------------------------------
# system_envs


def env_refusal(name: str, extra: Sequence[str] = ()) -> str | None:
    """Why a config may not set the environment variable `name` in its workers (None: it may).
    `extra` are the deployment's additions (POLICYLAB_SYSTEM_ENVS_ALLOW): exact names or globs."""
    if RESERVED_ENV.match(name):
        return f"{name} cannot be set from a config: the interpreter, the loader or the platform itself reads it"
    allowed = (*SYSTEM_ENVS_ALLOWED, *extra)
    if name in allowed:
        return None
    families = [p for p in allowed if fnmatchcase(name, p)]
    if families and not LOCATION_WORDS.search(name):
        return None
    how = f"a deployment allows it by listing {name} in {SYSTEM_ENVS_ALLOW_VAR}"
    if families:
        return (f"{name} names a file, folder, address or plugin, which the {families[0]} family does not admit; "
                f"{how}")
    return (f"{name} is not an allowed system_envs variable (allowed: {', '.join(allowed)}, except names of "
            f"files, folders, addresses and plugins); {how}")


def _system_envs(config: PipelineConfig) -> Iterator[tuple[str, Mapping[str, str]]]:
    yield "system_envs", config.system_envs
    for role in WORKER_ROLES:
        worker = getattr(config, role, None)
        if worker is not None:
            yield f"{role}.system_envs", worker.system_envs
    for name, reward in config.rewards.items():
        yield f"rewards.{name}.system_envs", reward.system_envs
