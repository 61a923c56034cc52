"""Tiny Qwen2 / Qwen3 / Qwen3-MoE / Llama models for the megatron tests, and megatron-core's CUDA code paths run on CPU.

megatron-core 0.16 asks for CUDA in a handful of places, also for fp32 work a CPU does as well: tensors
created with device="cuda" (the optimizer's loss-scale buffer, gradient-norm buffers),
torch.cuda.current_device() for allocations, torch.cuda.synchronize() before a checkpoint write,
`.type() == "torch.cuda.FloatTensor"` in gradient clipping, its CUDA RNG tracker (seeding, and the fork
around attention), the alltoall MoE dispatcher's side stream (one CPU "stream"). `emulated_cuda()` redirects those to the CPU — a TorchFunctionMode rewrites CUDA
devices to CPU; torch.cuda.current_device / synchronize, the strategy's seeding of the tracker and the
tracker's fork are replaced (our models have no dropout) — and lets the strategies' CUDA check pass. Everything else runs as megatron-core's own code: parallel state over gloo,
GPTModel with the local layer spec, DDP, the optimizer, the pipeline schedules, distributed checkpoints.

What the emulation does not show: CUDA kernels, nccl, Transformer Engine layers, GPU bf16 numerics.
Those are the gpu-marked tests (tests/trainer/train/test_megatron_gpu.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from trainer.models.batch import build_batch, response_logprobs

VOCAB = 301  # odd: tensor parallelism pads the vocabulary by one row at TP 2
ARCHS = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
}
# Qwen3's head_dim is explicit (16, not hidden_size / heads = 8); the MoE model has 4 experts, top-2
EXTRA = {
    "qwen3": {"head_dim": 16},
    "qwen3_moe": {
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 24,
        "norm_topk_prob": True,
    },
}


def tiny_causal_lm(
    arch: str, *, tied: bool = False, layers: int = 4, seed: int = 0, **overrides: Any
) -> nn.Module:
    """A random tiny model with grouped-query attention (4 heads, 2 key/value heads, head_dim 8; Qwen3's
    16); every parameter random (norm weights and biases too), so a misplaced tensor cannot go
    unnoticed. `overrides`: more config fields."""
    config_cls, model_cls = ARCHS[arch]
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-6,
        **(EXTRA.get(arch, {}) | overrides),
    )
    model = model_cls(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(
                torch.randn(param.shape, generator=generator) * 0.2 + (1.0 if param.dim() == 1 else 0.0)
            )
    return model.eval()


def rollout_batch(rows: int, seed: int) -> dict[str, torch.Tensor]:
    """Left-padded prompts and right-padded responses of different lengths (trainer.models.batch)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, VOCAB, (int(n),), generator=generator).tolist()
        for n in torch.randint(2, 7, (rows,), generator=generator)
    ]
    responses = [
        torch.randint(3, VOCAB, (int(n),), generator=generator).tolist()
        for n in torch.randint(1, 6, (rows,), generator=generator)
    ]
    return build_batch(prompts, responses, pad_token_id=0)


def nll_loss(total_tokens: float, temperature: float = 0.7) -> Callable[..., Any]:
    """Σ response-token NLL / all response tokens of the step (every rank, every micro-batch): a LossFn."""

    def loss_fn(model: Any, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        mask = mb["response_mask"]
        nll = -response_logprobs(model, mb, temperature) * mask
        return nll.sum() / total_tokens, {"tokens": float(mask.sum())}

    return loss_fn


class CudaAsCpu(TorchFunctionMode):
    """Every torch call that names a CUDA device gets the CPU; `.cuda()` is a no-op; `.type()` reports
    a CPU tensor as its CUDA type (megatron's gradient clipping asserts it); pinned memory is plain."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if kwargs.get("pin_memory"):  # host memory staged for a CUDA copy (rope_utils' CP index)
            kwargs["pin_memory"] = False
        name = getattr(func, "__name__", "")
        if name == "cuda":
            return args[0]
        if name == "type" and len(args) == 1 and not kwargs:
            return func(*args).replace("torch.", "torch.cuda.", 1)
        if name == "to":
            args = tuple(_cpu(a) if isinstance(a, str | torch.device) else a for a in args)
        return func(*args, **kwargs)


class _CpuStream:
    """The one 'stream' of the CPU: waiting on it, or on its events, is a no-op."""

    def wait_stream(self, other: Any) -> None:
        pass

    def record_event(self) -> _CpuStream:
        return self

    def synchronize(self) -> None:
        pass


CPU_STREAM = _CpuStream()


def _host_copy(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """moe_utils.maybe_move_tensor_to_cpu for a tensor already on the CPU: the numpy array it returns for
    a CUDA tensor (the alltoall dispatcher's split sizes), where the original returns a CPU tensor as is."""
    return tensor.numpy() if as_numpy and torch.is_tensor(tensor) else tensor


def _cpu(device: Any) -> Any:
    if isinstance(device, int) or (isinstance(device, str) and device.startswith("cuda")):
        return torch.device("cpu")
    if isinstance(device, torch.device) and device.type == "cuda":
        return torch.device("cpu")
    return device


@contextlib.contextmanager
def emulated_cuda() -> Iterator[None]:
    """megatron-core and the megatron strategies on CPU (see the module docstring)."""
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker
    from megatron.core.transformer.moe import token_dispatcher
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

    import trainer.train.megatron_config
    import trainer.train.megatron_strategy

    with contextlib.ExitStack() as stack:
        for target, value in (
            (torch.cuda, ("current_device", lambda: "cpu")),
            (torch.cuda, ("synchronize", lambda *a, **k: None)),
            # the alltoall MoE dispatcher copies its split sizes to the host on a side stream: one stream
            (torch.cuda, ("current_stream", lambda *a, **k: CPU_STREAM)),
            (torch.cuda, ("stream", lambda *a, **k: contextlib.nullcontext())),
            (MoEAlltoAllTokenDispatcher, ("cuda_dtoh_stream", CPU_STREAM)),
            (token_dispatcher, ("maybe_move_tensor_to_cpu", _host_copy)),
            (trainer.train.megatron_config, ("require_cuda", lambda name: None)),
            (trainer.train.megatron_strategy, ("require_cuda", lambda name: None)),
            (trainer.train.megatron_strategy, ("seed_model_parallel_rng", lambda: None)),
            (CudaRNGStatesTracker, ("fork", lambda self, *a, **k: contextlib.nullcontext())),
        ):
            stack.enter_context(mock.patch.object(target, value[0], value[1]))
        stack.enter_context(CudaAsCpu())
        yield


def run_ranks(fn: Callable[..., Any], world_size: int, out_dir: Path, *args: Any) -> list[Any]:
    """fn(rank, world_size, *args) on `world_size` spawned processes joined in a gloo group, under
    emulated_cuda; returns what each rank returned (in rank order). A failing rank fails the call."""
    import torch.multiprocessing as mp

    from trainer.cluster.distributed import find_free_port

    mp.spawn(
        _rank_main, args=(world_size, find_free_port(), str(out_dir), fn, args), nprocs=world_size, join=True
    )
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _rank_main(
    rank: int, world_size: int, port: int, out_dir: str, fn: Callable[..., Any], args: tuple
) -> None:
    from trainer.cluster import distributed

    torch.set_num_threads(1)
    distributed.init_process_group(
        rank=rank, world_size=world_size, master_addr="127.0.0.1", master_port=port
    )
    try:
        with emulated_cuda():
            result = fn(rank, world_size, *args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        distributed.destroy_process_group()
