"""hf_infer on CPU: seeded runs give exactly the tokens and log-probs of the earlier CPU-only loop.

The decode loop moved its sampling, filtering and stop checks onto the engine's device; on CPU that
must change nothing. ``hf_seeded_tokens.json`` holds what the loop before that change (the
``trainer/rollout/hf.py`` of commit 7853fe5, which sampled on the host) generated for each case
below, written once by running this file as a script against that version:

    git show 7853fe5:trainer/rollout/hf.py > /tmp/hf_old.py
    python -m tests.trainer.rollout.test_hf_seeded_tokens /tmp/hf_old.py

Every case runs the tiny model (``build_tiny_model(size="tiny", seed=3)``, fp32, its byte-level
tokenizer for stop strings) on three left-padded prompts. The fixture is tied to the torch and
transformers versions it records (weights are drawn by torch's RNG at build time): regenerate it,
as above, after upgrading either.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFInferEngine

FIXTURE = Path(__file__).with_name("hf_seeded_tokens.json")
PROMPTS = [[40, 41, 42, 43, 44, 45], [72, 101, 108, 108, 111], [10, 11, 12, 13, 14, 15, 16, 17]]
IM_END = 258  # the tiny tokenizer's EOS, which a random model almost never picks
LETTERS = list(range(97, 123))  # a-z as EOS: about one step in ten ends a row
DIGITS = list(range(48, 58))

# name -> (engine keyword arguments, SamplingParams keyword arguments)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "temperature_1": ({}, {"max_new_tokens": 16, "n": 2, "seed": 1}),
    "temperature_0.7_eos": ({"eos_token_ids": LETTERS}, {"max_new_tokens": 16, "temperature": 0.7, "seed": 2}),
    "top_k": ({}, {"max_new_tokens": 12, "top_k": 8, "seed": 3}),
    "top_p": ({}, {"max_new_tokens": 12, "temperature": 0.8, "top_p": 0.9, "seed": 4}),
    "min_p": ({}, {"max_new_tokens": 12, "min_p": 0.3, "seed": 5}),
    "top_k_top_p_min_p": ({}, {"max_new_tokens": 12, "top_k": 50, "top_p": 0.95, "min_p": 0.1, "seed": 6}),
    "repetition_penalty": ({}, {"max_new_tokens": 16, "temperature": 0.9, "repetition_penalty": 1.5, "seed": 7}),
    "repetition_penalty_greedy": ({}, {"max_new_tokens": 16, "temperature": 0.0, "repetition_penalty": 1.3}),
    "min_new_tokens": ({"eos_token_ids": LETTERS},
                       {"max_new_tokens": 16, "min_new_tokens": 4, "stop_token_ids": DIGITS, "seed": 9}),
    "stop_token_ids": ({}, {"max_new_tokens": 16, "stop_token_ids": LETTERS, "n": 2, "seed": 10}),
    "stop_strings": ({}, {"max_new_tokens": 16, "stop_strings": ["a", "e", " t", "xy"], "min_new_tokens": 2,
                          "n": 2, "seed": 11}),
    "greedy": ({"eos_token_ids": LETTERS}, {"max_new_tokens": 16, "temperature": 0.0}),
    "n3_max_batch_size_4": ({"eos_token_ids": LETTERS, "max_batch_size": 4},
                            {"max_new_tokens": 16, "n": 3, "seed": 13}),
    # rows that end early in a batch that is not the last: the next batch's draws start where it stopped
    "n2_max_batch_size_1": ({"eos_token_ids": LETTERS, "max_batch_size": 1}, {"max_new_tokens": 16, "n": 2, "seed": 16}),
    "ignore_eos": ({"eos_token_ids": LETTERS}, {"max_new_tokens": 12, "ignore_eos": True, "stop_token_ids": DIGITS,
                                                "seed": 14}),
    "everything": ({"eos_token_ids": LETTERS, "max_batch_size": 2},
                   {"max_new_tokens": 16, "temperature": 0.8, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.2,
                    "min_new_tokens": 3, "stop_token_ids": DIGITS, "stop_strings": ["q"], "n": 2, "seed": 15}),
}


def build(tmp: Path) -> tuple[Any, Any]:
    from trainer.models.loading import load_tokenizer
    from trainer.models.tiny import build_tiny_model

    path = build_tiny_model(tmp, size="tiny", seed=3)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), load_tokenizer(path)


def run_case(engine_cls: type, model: Any, tokenizer: Any, name: str) -> list[dict[str, Any]]:
    engine_kwargs, params = CASES[name]
    kwargs = {"eos_token_ids": [IM_END], "pad_token_id": 0, "decode": tokenizer.decode, **engine_kwargs}
    gens = engine_cls(model, **kwargs).generate(PROMPTS, SamplingParams(**params))
    return [{"prompt_index": g.prompt_index, "sample_index": g.sample_index, "token_ids": g.token_ids,
             "logprobs": g.logprobs, "stop_reason": g.stop_reason} for g in gens]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_fixture_covers_every_case_and_ends_rows_every_way(expected: dict[str, Any]) -> None:
    assert set(expected["cases"]) == set(CASES)
    reasons = {g["stop_reason"] for gens in expected["cases"].values() for g in gens}
    assert reasons == {"eos", "stop", "length"}


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_tokens_and_logprobs_match_the_host_sampling_loop(tiny: tuple, expected: dict[str, Any],
                                                              name: str) -> None:
    model, tokenizer = tiny
    got = run_case(HFInferEngine, model, tokenizer, name)
    want = expected["cases"][name]
    assert [(g["prompt_index"], g["sample_index"], g["token_ids"], g["stop_reason"]) for g in got] == \
        [(g["prompt_index"], g["sample_index"], g["token_ids"], g["stop_reason"]) for g in want]
    for g, w in zip(got, want, strict=True):
        assert g["logprobs"] == pytest.approx(w["logprobs"], abs=1e-6, rel=0)


def write_fixture(engine_path: str) -> None:
    """Run every case with the engine class in ``engine_path`` and write the fixture."""
    import importlib.util
    import tempfile

    import transformers

    spec = importlib.util.spec_from_file_location("hf_engine_under_record", engine_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = build(Path(tmp))
        cases = {name: run_case(module.HFInferEngine, model, tokenizer, name) for name in CASES}
    made_with = {"engine": engine_path, "torch": torch.__version__, "transformers": transformers.__version__}
    FIXTURE.write_text(json.dumps({"made_with": made_with, "cases": cases}, indent=1) + "\n")
    print(f"wrote {FIXTURE} ({len(cases)} cases)")


if __name__ == "__main__":
    write_fixture(sys.argv[1])
