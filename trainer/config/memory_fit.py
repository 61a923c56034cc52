"""Will each role fit on its devices? A memory estimate per role before anything is launched (torch-free).

Per device of a role, in bytes. P = the model's parameters, w = bytes of the role's dtype (model_args.dtype,
else the model config's, else fp32), m = the model-parallel split (Megatron TP × PP; an inference engine's
tensor-parallel size; else 1), z = the data-parallel shards a strategy splits that state over:

    weights      P·w / (m·z_w)
    gradients    P·w / (m·z_g)                      training roles
    optimizer    P·k / (m·z_o)                      training roles, Adam/AdamW: k = 2·w for torch_train and
                                                    fsdp2_train (moments in the parameter dtype); k = 12 for
                                                    deepspeed_train / megatron_train with 16-bit weights (fp32
                                                    master copy + two fp32 moments), 8 with fp32 weights; SGD 0
    activations  per micro-batch of T tokens on one rank (T = micro-batch × (prompt_length + response_length),
                 ÷ Megatron's CP), h = hidden size, L = layers, V = vocabulary:
                   one layer           a = 17·h·w per token (Korthikanti et al. 2022: 34·s·b·h bytes per layer at
                                       16 bit with a fused attention kernel), ÷ TP
                   training            L·a·T without gradient checkpointing, else L·h·w·T (each layer's input)
                                       + a·T (the layer being recomputed)
                   forward only        a·T (one layer at a time)
                   logits              T·V·(w + 4) (the logits and their fp32 log-softmax), ÷ TP; V = 1 for
                                       the critic's value head and reward models' score
    kv cache     generation roles: 2·L·kv_heads·head_dim·w per token, ÷ TP (kv heads are split, at least one kept)
                   hf_infer            the batch one engine generates: ⌈S / engines⌉ sequences of prompt_length +
                                       response_length tokens (S = samples per rollout; validation:
                                       val_batch_size × val_n_sample), + the prefill of one layer and the
                                       last position's fp32 logits
                   vllm / sglang       what the engine reserves: gpu_memory_utilization (mem_fraction_static) × the
                                       device, less the weights (or kv_cache_memory_bytes); it must hold at least
                                       one whole sequence, and fewer than the batch's sequences run in turns

Sharding: fsdp2_train/_infer split weights, gradients and optimizer over its shard group (fsdp_size, else every
rank; cpu_offload keeps them on the host); DeepSpeed ZeRO stage ≥ 1 splits the optimizer, ≥ 2 the gradients,
3 the weights, over the data-parallel ranks (offload_optimizer / offload_param move them to the host); Megatron's
use_distributed_optimizer splits the optimizer over its data-parallel ranks.

An estimate: allocator fragmentation, CUDA context (~0.5-1 GiB), communication buffers and temporary copies come
on top, so a role within ~10 % of its device is flagged as tight.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainer.config.confinement import parse_tiny_ref
from trainer.config.schema import (
    DeepSpeedConfig,
    Fsdp2Config,
    MegatronConfig,
    PipelineConfig,
    SglangConfig,
    VllmConfig,
    WorkerConfig,
)
from trainer.config.topology import (
    TRAINING_ROLES,
    dp_size,
    lengths,
    roles,
    samples_per_rollout,
    strategy_config,
    train_shape,
)
from trainer.config.topology import strategy_name as role_strategy
from trainer.config.topology import world_size as role_world

GIB = 1024**3
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "float32": 4, "bfloat16": 2, "float16": 2}
CONFIG_JSON_LIMIT = 1 << 20  # a model's config.json is a few KB; anything past this is not one
TIGHT = 0.9  # a role using more than this share of its device is flagged as tight
GENERATION_STRATEGIES = ("vllm", "sglang", "hf_infer")


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs to know about a model."""

    params: int
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int | None = None  # the dtype its config.json stores, if it says
    source: str = "declared"  # "config.json", "declared", or "tiny model"


def shape_from_hf_config(config: Mapping[str, Any], source: str = "config.json") -> ModelShape:
    """A decoder-only transformer's shape and parameter count from its HF config.json (Llama, Qwen2, Mistral
    and their mixture-of-experts variants):

        embeddings  V·h (and V·h again for an untied output head)
        per layer   attention  h·(a·d) + 2·h·(k·d) + (a·d)·h   (+ biases: Qwen2 q, k, v; attention_bias q, k, v, o)
                    MLP        3·h·i                           (E experts: 3·h·i_e each + the router h·E
                                                               + a shared expert 3·h·i_s and its gate h)
                    norms      2·h
        final norm  h
    with a attention heads, k key/value heads, d = head_dim (default h / a), i the MLP width."""
    h = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    d = int(config.get("head_dim") or h // heads)
    vocab = int(config["vocab_size"])
    attention = h * heads * d + 2 * h * kv * d + heads * d * h
    if config.get("model_type", "").startswith("qwen2"):
        attention += heads * d + 2 * kv * d
    elif config.get("attention_bias"):
        attention += heads * d + 2 * kv * d + h
    experts = int(config.get("num_local_experts") or config.get("num_experts") or 0)
    if experts:
        width = int(config.get("moe_intermediate_size") or config["intermediate_size"])
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        mlp = experts * 3 * h * width + h * experts + (3 * h * shared + h if shared else 0)
    else:
        mlp = 3 * h * int(config["intermediate_size"]) + (2 * int(config["intermediate_size"]) + h
                                                          if config.get("mlp_bias") else 0)
    tied = bool(config.get("tie_word_embeddings", False))
    params = vocab * h * (1 if tied else 2) + layers * (attention + mlp + 2 * h) + h
    dtype = config.get("torch_dtype") or config.get("dtype")
    return ModelShape(params, layers, h, kv, d, vocab, DTYPE_BYTES.get(str(dtype)), source)


def read_model_config(path: str, roots: Sequence[str | Path]) -> dict[str, Any] | None:
    """`<path>/config.json` as a dict when `path` is a local directory inside one of `roots` (symlinks
    resolved) and the file is a small JSON object; None otherwise (a hub id, a missing or foreign file)."""
    try:
        folder = Path(path).resolve()
        allowed = [Path(root).resolve() for root in roots]
        if not any(folder.is_relative_to(root) for root in allowed):
            return None
        file = folder / "config.json"
        if not file.is_file() or file.stat().st_size > CONFIG_JSON_LIMIT:
            return None
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def tiny_shape(path: str) -> ModelShape | None:
    """The shape of a `tiny://<size>` model the trainer builds itself (trainer.config.tiny_shapes.SIZES)."""
    from trainer.config.tiny_shapes import SIZES, SPECIAL_TOKENS

    try:
        size, _ = parse_tiny_ref(path)
    except ValueError:
        return None
    config = {**SIZES[size], "vocab_size": 256 + len(SPECIAL_TOKENS), "tie_word_embeddings": True,
              "model_type": "qwen2"}
    return shape_from_hf_config(config, source="tiny model")


def model_shapes(config: PipelineConfig, read: Callable[[str], Mapping[str, Any] | None],
                 declared: ModelShape | None = None) -> dict[str, ModelShape | None]:
    """The shape of every model the config names: built-in tiny models, else its config.json through `read`,
    else `declared` (sizes the user typed in), else None (unknown)."""
    shapes: dict[str, ModelShape | None] = {}
    for worker in roles(config).values():
        path = worker.model_args.model_name_or_path
        if not path or path in shapes:
            continue
        shape = tiny_shape(path) if path.startswith("tiny://") else None
        if shape is None and not path.startswith("tiny://"):
            raw = read(path)
            if raw is not None:
                try:
                    shape = shape_from_hf_config(raw)
                except (KeyError, TypeError, ValueError, ZeroDivisionError):
                    shape = None
        shapes[path] = shape or declared
    return shapes


@dataclass
class RoleMemory:
    role: str
    strategy: str
    model: str | None
    devices: list[int] | None
    workers: int
    parts: dict[str, int] = field(default_factory=dict)  # bytes per device: weights, gradients, …
    notes: list[str] = field(default_factory=list)
    fits: bool | None = None  # None: the model's size is unknown

    @property
    def total(self) -> int:
        return sum(self.parts.values())


@dataclass
class MemoryEstimate:
    device_bytes: int
    roles: list[RoleMemory]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"device_bytes": self.device_bytes, "warnings": self.warnings,
                "roles": [{**asdict(r), "total": r.total} for r in self.roles]}


def dtype_bytes(worker: WorkerConfig, shape: ModelShape) -> int:
    if worker.model_args.dtype is not None:
        return DTYPE_BYTES[worker.model_args.dtype]
    return shape.dtype_bytes or 4


def kv_bytes_per_token(shape: ModelShape, w: int, tp: int) -> int:
    return 2 * shape.layers * max(1, shape.kv_heads // tp) * shape.head_dim * w


def layer_activation(shape: ModelShape, w: int, tp: int) -> float:
    """Bytes per token that one transformer layer keeps for its backward pass (17·h·w, split by TP)."""
    return 17 * shape.hidden * w / tp


def outputs(role: str, shape: ModelShape) -> int:
    """Width of the model's head: the vocabulary, or one score for the critic and reward models."""
    return 1 if role == "critic" or role.startswith("rewards.") else shape.vocab


def training_parts(config: PipelineConfig, role: str, worker: WorkerConfig, shape: ModelShape,
                   notes: list[str]) -> dict[str, int]:
    name, cfg = role_strategy(role, worker), strategy_config(worker)
    w = dtype_bytes(worker, shape)
    world, dp = role_world(role, worker), dp_size(role, worker)
    split, z_w, z_g, z_o, cp = 1, 1, 1, 1, 1
    adam = worker.training_args.optim != "sgd"
    k = 2 * w if name in ("torch_train", "fsdp2_train") else (12 if w < 4 else 8)
    on_host: set[str] = set()
    if isinstance(cfg, MegatronConfig):
        split = cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size
        cp = cfg.context_parallel_size
        if cfg.use_distributed_optimizer:
            z_o = dp
    elif isinstance(cfg, Fsdp2Config):
        z_w = z_g = z_o = cfg.fsdp_size if cfg.fsdp_size > 0 else world
        if cfg.cpu_offload:
            on_host |= {"weights", "gradients", "optimizer"}
    elif isinstance(cfg, DeepSpeedConfig):
        stage = cfg.zero_optimization.stage
        z_o = dp if stage >= 1 else 1
        z_g = dp if stage >= 2 else 1
        z_w = dp if stage == 3 else 1
        if cfg.zero_optimization.offload_optimizer is not None and cfg.zero_optimization.offload_optimizer.device != "none":
            on_host.add("optimizer")
        if cfg.zero_optimization.offload_param is not None and cfg.zero_optimization.offload_param.device != "none":
            on_host.add("weights")
    tp = cfg.tensor_model_parallel_size if isinstance(cfg, MegatronConfig) else 1
    tokens = train_shape(config, role.split(".")[0]).micro_batch * lengths(config).total / cp
    layer = layer_activation(shape, w, tp)
    if worker.model_args.disable_gradient_checkpointing:
        kept = shape.layers * layer * tokens
    else:
        kept = (shape.layers * shape.hidden * w / tp + layer) * tokens
    logits = tokens * outputs(role, shape) * (w + 4) / tp
    parts = {
        "weights": shape.params * w / (split * z_w),
        "gradients": shape.params * w / (split * z_g),
        "optimizer": shape.params * k / (split * z_o) if adam else 0,
        "activations": kept + logits,
    }
    for part in sorted(on_host):
        notes.append(f"{part} kept in host memory (offload)")
        parts[part] = 0
    return {part: math.ceil(value) for part, value in parts.items()}


def forward_parts(config: PipelineConfig, role: str, worker: WorkerConfig, shape: ModelShape) -> dict[str, int]:
    cfg = strategy_config(worker)
    w = dtype_bytes(worker, shape)
    split, z_w, tp = 1, 1, 1
    if isinstance(cfg, MegatronConfig):
        tp = cfg.tensor_model_parallel_size
        split = tp * cfg.pipeline_model_parallel_size
    elif isinstance(cfg, Fsdp2Config):
        z_w = 1 if cfg.cpu_offload else (cfg.fsdp_size if cfg.fsdp_size > 0 else role_world(role, worker))
    elif isinstance(cfg, DeepSpeedConfig) and cfg.zero_optimization.stage == 3:
        z_w = dp_size(role, worker)
    tokens = worker.infer_batch_size * lengths(config).total
    weights = 0 if isinstance(cfg, Fsdp2Config) and cfg.cpu_offload else shape.params * w / (split * z_w)
    activations = layer_activation(shape, w, tp) * tokens + tokens * outputs(role, shape) * (w + 4) / tp
    return {"weights": math.ceil(weights), "activations": math.ceil(activations)}


def generation_parts(config: PipelineConfig, role: str, worker: WorkerConfig, shape: ModelShape,
                     device_bytes: int, notes: list[str]) -> tuple[dict[str, int], bool]:
    """(parts, whether the engine can run at all) of a generation role."""
    name, cfg = role_strategy(role, worker), strategy_config(worker)
    w = dtype_bytes(worker, shape)
    tp = cfg.tensor_parallel_size if isinstance(cfg, VllmConfig) else cfg.tp_size if isinstance(cfg, SglangConfig) else 1
    weights = math.ceil(shape.params * w / tp)
    per_token = kv_bytes_per_token(shape, w, tp)
    sequence = lengths(config).total  # an agentic trajectory under ROLL's cap: sequence_length
    engines = role_world(role, worker)
    if role == "actor_infer":
        batch = math.ceil(samples_per_rollout(config) / engines)
    else:  # validation
        batch = math.ceil(config.val_batch_size * config.val_n_sample / engines)
    if name == "hf_infer":
        kv = per_token * sequence * batch
        prefill = layer_activation(shape, w, 1) * batch * lengths(config).prompt + batch * shape.vocab * 4
        return {"weights": weights, "activations": math.ceil(prefill), "kv_cache": kv}, True
    share = cfg.gpu_memory_utilization if isinstance(cfg, VllmConfig) else cfg.mem_fraction_static
    kv_bytes = cfg.kv_cache_memory_bytes if isinstance(cfg, VllmConfig) else None
    reserved = int(share * device_bytes)
    kv = kv_bytes if kv_bytes is not None else reserved - weights
    room = kv // (per_token * sequence) if kv > 0 else 0
    if kv <= 0:
        notes.append(f"the weights ({weights / GIB:.1f} GiB) fill the {share:.0%} of the device {name} may take")
        return {"weights": weights, "kv_cache": max(kv, 0)}, False
    if room < 1:
        notes.append(f"the KV cache ({kv / GIB:.2f} GiB) cannot hold one sequence of {sequence} tokens")
        return {"weights": weights, "kv_cache": kv}, False
    if room < batch:
        notes.append(f"the KV cache holds {room} sequences of {sequence} tokens at once; the {batch} of a "
                     "rollout run in turns")
    else:
        notes.append(f"the KV cache holds {room} sequences of {sequence} tokens at once (a rollout: {batch})")
    return {"weights": weights, "kv_cache": kv}, True


def estimate_memory(config: PipelineConfig, shapes: Mapping[str, ModelShape | None],
                    device_bytes: int = 80 * GIB) -> MemoryEstimate:
    """Per role: bytes per device for weights, gradients, optimizer states, activations and KV cache, and
    whether that fits in `device_bytes`; `shapes` maps each model path to its shape (None: unknown)."""
    out: list[RoleMemory] = []
    warnings: list[str] = []
    for role, worker in roles(config).items():
        path = worker.model_args.model_name_or_path
        if not path:
            continue  # a rule reward, or a role without a model of its own
        name = role_strategy(role, worker)
        estimate = RoleMemory(role, name, path, list(worker.device_mapping) if worker.device_mapping else None,
                              role_world(role, worker))
        out.append(estimate)
        shape = shapes.get(path)
        if shape is None:
            estimate.notes.append("model size unknown: its config.json is not readable here; declare its size")
            continue
        runs = True
        if role.split(".")[0] in TRAINING_ROLES:
            estimate.parts = training_parts(config, role, worker, shape, estimate.notes)
        elif name in GENERATION_STRATEGIES and (role == "actor_infer" or worker.generating_args is not None):
            estimate.parts, runs = generation_parts(config, role, worker, shape, device_bytes, estimate.notes)
        else:
            estimate.parts = forward_parts(config, role, worker, shape)
        estimate.fits = runs and estimate.total <= device_bytes
        if not estimate.fits:
            warnings.append(f"{role} needs {estimate.total / GIB:.1f} GiB per device and will not fit in "
                            f"{device_bytes / GIB:.0f} GiB" + (f": {estimate.notes[-1]}" if not runs else ""))
        elif estimate.total > TIGHT * device_bytes and name not in ("vllm", "sglang"):
            warnings.append(f"{role} needs {estimate.total / GIB:.1f} GiB of {device_bytes / GIB:.0f} GiB per device: "
                            "tight, allocator and communication buffers come on top")
    return MemoryEstimate(device_bytes, out, warnings)
