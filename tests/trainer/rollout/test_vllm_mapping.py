"""How the vllm engine reads its config and our SamplingParams, checked without starting vLLM; and
that vllm stays a lazy import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT
from trainer.config.schema import VllmConfig
from trainer.rollout.base import SamplingParams
from trainer.rollout.vllm import (
    CPU_DEFAULT_KV_CACHE_BYTES,
    engine_kwargs,
    request_seeds,
    sampling_kwargs,
    stop_reason,
)


def kwargs(on_gpu: bool = False, colocated: bool = False, **fields: object) -> dict:
    return engine_kwargs(VllmConfig(**fields).model_dump(), dtype="float32", seed=3, on_gpu=on_gpu,
                         colocated=colocated)


def test_strategy_config_fields_reach_the_engine() -> None:
    got = kwargs(block_size=32, max_model_len=256, enforce_eager=True, enable_prefix_caching=True,
                 max_num_batched_tokens=1024, max_num_seqs=8, gpu_memory_utilization=0.3, load_format="dummy",
                 enable_chunked_prefill=False, disable_log_stats=False, kv_cache_memory_bytes=1234)
    assert got == {
        "block_size": 32, "max_model_len": 256, "enforce_eager": True, "enable_prefix_caching": True,
        "max_num_batched_tokens": 1024, "max_num_seqs": 8, "gpu_memory_utilization": 0.3, "load_format": "dummy",
        "enable_chunked_prefill": False, "disable_log_stats": False, "kv_cache_memory_bytes": 1234,
        "dtype": "float32", "seed": 3, "logprobs_mode": "processed_logprobs", "trust_remote_code": False,
    }


def test_cpu_gets_an_explicit_kv_cache_and_refuses_tensor_parallel() -> None:
    cpu = kwargs()
    assert cpu["kv_cache_memory_bytes"] == CPU_DEFAULT_KV_CACHE_BYTES == 1 << 30
    assert "block_size" not in cpu and "enable_sleep_mode" not in cpu  # unset: vLLM's backend picks
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        kwargs(tensor_parallel_size=2)


def test_gpu_takes_tensor_parallel_and_sleeps_only_when_colocated() -> None:
    gpu = kwargs(on_gpu=True, tensor_parallel_size=2)
    assert gpu["tensor_parallel_size"] == 2 and gpu["enable_sleep_mode"] is False
    assert "kv_cache_memory_bytes" not in gpu  # gpu_memory_utilization sizes it there
    assert kwargs(on_gpu=True, colocated=True)["enable_sleep_mode"] is True


def test_request_seeds_never_share_a_random_stream() -> None:
    """vLLM seeds sample j of a request seed + j: every (prompt, sample) seed must be distinct."""
    seeds = request_seeds(7, prompts=64, n=8)
    assert seeds == request_seeds(7, prompts=64, n=8) and seeds != request_seeds(8, prompts=64, n=8)
    streams = {s + j for s in seeds for j in range(8)}
    assert len(streams) == 64 * 8
    assert request_seeds(None, prompts=3, n=2) == [None, None, None]


def test_sampling_params_map_to_vllms_names() -> None:
    params = SamplingParams(max_new_tokens=9, temperature=0.5, top_p=0.9, top_k=-1, min_p=0.05, n=4,
                            stop_token_ids=[5], stop_strings=["\n\n"], min_new_tokens=2, repetition_penalty=1.1,
                            ignore_eos=True)
    assert sampling_kwargs(params, seed=11) == {
        "n": 4, "max_tokens": 9, "min_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 0, "min_p": 0.05,
        "repetition_penalty": 1.1, "stop": ["\n\n"], "stop_token_ids": [5], "ignore_eos": True, "seed": 11,
        "logprobs": 0, "detokenize": True,
    }
    plain = sampling_kwargs(SamplingParams(max_new_tokens=2, top_k=20), seed=None)
    assert plain["top_k"] == 20 and plain["stop"] is None and plain["detokenize"] is False


@pytest.mark.parametrize(("finish", "matched", "ours"), [
    ("length", None, "length"), ("stop", None, "eos"), ("stop", 17, "stop"), ("stop", "\n\n", "stop"),
])
def test_stop_reasons(finish: str, matched: object, ours: str) -> None:
    assert stop_reason(finish, matched) == ours


def test_an_aborted_request_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="abort"):
        stop_reason("abort", None)


def test_vllm_is_imported_only_when_an_engine_starts() -> None:
    code = ("import sys, trainer.rollout.vllm, trainer.roles, trainer.config; "
            "assert 'vllm' not in sys.modules, 'vllm imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_logprob_mismatch_over_real_tokens_only() -> None:
    import torch

    from trainer.pipeline.learner import logprob_mismatch
    from trainer.pipeline.rlvr import rollout_log_probs
    from trainer.rollout.base import Generation

    gens = [Generation(0, 0, [5, 6], [-1.0, -2.0], "length"), Generation(0, 1, [7], [-0.5], "eos")]
    engine = rollout_log_probs(gens, width=2)
    assert engine.tolist() == [[-1.0, -2.0], [-0.5, 0.0]]
    trainer = torch.tensor([[-1.25, -2.0], [-0.25, -9.0]])  # -9 sits on padding: ignored
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    got = logprob_mismatch(engine, trainer, mask)
    assert got == pytest.approx({"rollout/logprob_diff_mean": (0.25 + 0.0 + 0.25) / 3,
                                 "rollout/logprob_diff_max": 0.25})


def test_preflight_wants_gpus_for_a_tensor_parallel_vllm_engine() -> None:
    from trainer.config.preflight import check_devices
    from trainer.config.schema import PipelineConfig

    def infer(**options: object) -> PipelineConfig:
        return PipelineConfig.model_validate({"actor_infer": {
            "strategy_args": {"strategy_name": "vllm", "strategy_config": options}, "device_mapping": [0, 1]}})

    [issue] = check_devices(infer(tensor_parallel_size=2), gpus=0)
    assert issue.path == "actor_infer.device_mapping" and "vllm needs 2 CUDA device(s)" in issue.message
    assert check_devices(infer(tensor_parallel_size=2), gpus=2) == []
    assert check_devices(infer(), gpus=0) == []  # one in-process engine per worker runs on CPU
