"""The vllm engine's GPU-only paths (the `vllm` CUDA wheel): sleep mode around a colocated trainer,
weight loading while asleep, and tensor parallelism with weights pushed through a file."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.rollout.base import SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
pytest.importorskip("vllm")

PROMPTS = [list(range(40, 80)), [7, 8, 9]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("small"), size="small", seed=0)


def start(model_dir: Path, colocated: bool, **fields: Any) -> Any:
    from trainer.config.schema import VllmConfig
    from trainer.rollout.vllm import VllmEngine, engine_kwargs

    options = VllmConfig(gpu_memory_utilization=0.2, enforce_eager=True, max_model_len=256, **fields)
    kwargs = engine_kwargs(options.model_dump(), dtype="float32", seed=0, on_gpu=True, colocated=colocated)
    return VllmEngine(str(model_dir), kwargs, sleep_level=options.sleep_level)


def gap(model: Any, gens: list, prompts: list[list[int]]) -> float:
    worst = 0.0
    for g in gens:
        ids = torch.tensor([prompts[g.prompt_index] + g.token_ids], device="cuda")
        with torch.no_grad():
            lp = model(ids).logits[0].float().log_softmax(-1)
        start = len(prompts[g.prompt_index]) - 1
        pairs = enumerate(zip(g.logprobs, g.token_ids, strict=True))
        worst = max(worst, *(abs(a - lp[start + i, t].item()) for i, (a, t) in pairs))
    return worst


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_frees_gpu_memory_and_weights_load_while_asleep(model_dir: Path, level: int) -> None:
    from transformers import AutoModelForCausalLM

    engine = start(model_dir, colocated=True, sleep_level=level)
    try:
        assert engine.sleep_enabled
        params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=1)
        engine.generate(PROMPTS, params)
        used = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
        engine.sleep()
        freed = used - (torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0])
        assert freed > 0.05 * used, f"sleep level {level} freed {freed} of {used} bytes"
        trained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.05 * torch.randn_like(p))
        engine.load_weights(dict(copy.deepcopy(trained).state_dict()))  # while asleep, as after an update
        engine.wake()
        assert gap(trained, engine.generate(PROMPTS, params), PROMPTS) < 1e-3
    finally:
        engine.shutdown()


def test_level_2_refuses_to_wake_without_new_weights(model_dir: Path) -> None:
    engine = start(model_dir, colocated=True, sleep_level=2)
    try:
        engine.sleep()
        with pytest.raises(RuntimeError, match="sleep_level"):
            engine.wake()
    finally:
        engine.shutdown()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensor_parallel_engine_takes_weights_through_a_file(model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    engine = start(model_dir, colocated=False, tensor_parallel_size=2)
    try:
        assert engine.sync_through_files
        trained = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
        with torch.no_grad():
            for p in trained.parameters():
                p.mul_(1.1)
        engine.load_weights(dict(trained.state_dict()))
        gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=1.0, seed=2))
        assert gap(trained, gens, PROMPTS) < 1e-3
    finally:
        engine.shutdown()
