"""hf_infer on CUDA: the decode loop samples on the GPU, agrees with the CPU when greedy, is
reproducible when seeded, and waits for the GPU only a few times per batch."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.cache_utils import DynamicCache

from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import CHECK_EVERY, HFInferEngine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPTS = [[40, 41, 42, 43, 44, 45], [72, 101, 108, 108, 111], [10, 11, 12, 13, 14, 15, 16, 17]]
LETTERS = list(range(97, 123))  # a-z as EOS: rows end early, at different steps


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreTrainedModel, Any]:
    from trainer.models.loading import load_tokenizer
    from trainer.models.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), size="tiny", seed=3)
    model = AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch.float32).eval()
    return model, load_tokenizer(path)


def engine(model: PreTrainedModel, device: str, **kwargs: Any) -> HFInferEngine:
    return HFInferEngine(copy.deepcopy(model), eos_token_ids=kwargs.pop("eos_token_ids", LETTERS), pad_token_id=0,
                         device=device, **kwargs)


def test_greedy_tokens_on_cuda_equal_the_cpus_in_fp32(tiny: tuple) -> None:
    model, tokenizer = tiny
    reasons = set()
    for params in (SamplingParams(max_new_tokens=24, temperature=0.0),
                   SamplingParams(max_new_tokens=24, temperature=0.0, repetition_penalty=1.3, min_new_tokens=3,
                                  stop_token_ids=list(range(48, 58)), n=2)):
        cpu = engine(model, "cpu").generate(PROMPTS, params)
        gpu = engine(model, "cuda").generate(PROMPTS, params)
        assert [(g.token_ids, g.stop_reason) for g in gpu] == [(g.token_ids, g.stop_reason) for g in cpu]
        for g, c in zip(gpu, cpu, strict=True):
            assert g.logprobs == pytest.approx(c.logprobs, abs=1e-4)
        reasons |= {g.stop_reason for g in cpu}
    assert reasons == {"eos", "length"}  # rows end at different steps, some early
    # greedy on this random model repeats one token per row ("NNN…", "222…" for rows 0 and 2)
    strings = SamplingParams(max_new_tokens=16, temperature=0.0, stop_strings=["NNN", "22"])
    cpu = engine(model, "cpu", eos_token_ids=[258], decode=tokenizer.decode).generate(PROMPTS, strings)
    gpu = engine(model, "cuda", eos_token_ids=[258], decode=tokenizer.decode).generate(PROMPTS, strings)
    assert [(g.token_ids, g.stop_reason) for g in gpu] == [(g.token_ids, g.stop_reason) for g in cpu]
    assert [(len(g.token_ids), g.stop_reason) for g in cpu] == [(3, "stop"), (16, "length"), (2, "stop")]


def test_seeded_sampling_on_cuda_is_reproducible(tiny: tuple) -> None:
    model, _ = tiny
    eng = engine(model, "cuda", max_batch_size=4)
    params = dict(max_new_tokens=24, n=3, top_k=50, top_p=0.95, min_p=0.05, repetition_penalty=1.2,
                  min_new_tokens=2)
    a = eng.generate(PROMPTS, SamplingParams(seed=7, **params))
    b = eng.generate(PROMPTS, SamplingParams(seed=7, **params))
    c = eng.generate(PROMPTS, SamplingParams(seed=8, **params))
    assert [(g.token_ids, g.logprobs, g.stop_reason) for g in a] == [(g.token_ids, g.logprobs, g.stop_reason) for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert all(len(g.token_ids) >= 2 for g in a)


def count_syncs(fn: Callable[[], object]) -> int:
    """Host-device synchronisations ``fn`` makes, as torch's sync debug mode reports them."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def test_the_decode_loop_syncs_only_every_few_steps(tiny: tuple) -> None:
    """Beyond what the model's own forward passes do (transformers' mask code may sync), a batch
    syncs a few times to set up and return, and once per CHECK_EVERY steps."""
    model, _ = tiny
    eng = engine(model, "cuda")
    steps = 64
    params = SamplingParams(max_new_tokens=steps, top_p=0.9, repetition_penalty=1.1, min_new_tokens=4, seed=0)
    eng.generate(PROMPTS, params)  # warm-up (lazy CUDA initialisation syncs)
    ids = torch.tensor([[0, 0] + PROMPTS[0], [0, 0, 0] + PROMPTS[1], PROMPTS[2]], device="cuda")
    mask = torch.cat([(torch.arange(8) >= torch.tensor([[2], [3], [0]])).long(),
                      torch.ones(3, steps, dtype=torch.long)], 1).cuda()

    def forwards_only() -> None:
        cache, step, pos = DynamicCache(), ids, (mask[:, :8].cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            for t in range(steps):
                out = eng.model(input_ids=step, attention_mask=mask[:, : 8 + t], position_ids=pos,
                                past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache, step, pos = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True), pos[:, -1:] + 1

    model_syncs = count_syncs(forwards_only)
    engine_syncs = count_syncs(lambda: eng.generate(PROMPTS, params))
    # generous for setup (inputs, id tensors) and the four result copies; a sync per step would be 64
    assert engine_syncs - model_syncs <= steps // CHECK_EVERY + 10, (engine_syncs, model_syncs)
