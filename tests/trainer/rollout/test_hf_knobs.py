"""hf_infer acts on repetition_penalty, min_new_tokens, ignore_eos and stop_strings.

Expected tokens come from transformers' own ``generate`` (its logits processors are an
independent implementation of the same rules) or from plain string search on an unconstrained run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFInferEngine

PROMPT = [40, 41, 42, 43, 44, 45]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreTrainedModel, object]:
    from trainer.models.loading import load_tokenizer
    from trainer.models.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), size="tiny", seed=3)
    model = AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch.float32).eval()
    return model, load_tokenizer(path)


def engine(model: PreTrainedModel, eos: int, tokenizer: object = None) -> HFInferEngine:
    decode = tokenizer.decode if tokenizer is not None else None
    return HFInferEngine(model, eos_token_ids=[eos], pad_token_id=0, decode=decode)


def hf_greedy(model: PreTrainedModel, eos: int | None, **kwargs: object) -> list[int]:
    out = model.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                         do_sample=False, eos_token_id=eos, pad_token_id=0, **kwargs)
    return out[0, len(PROMPT):].tolist()


def greedy(eng: HFInferEngine, **kwargs: object) -> tuple[list[int], str]:
    g = eng.generate([PROMPT], SamplingParams(temperature=0.0, **kwargs))[0]
    return g.token_ids, g.stop_reason


def test_repetition_penalty_matches_transformers_and_changes_greedy_output(tiny: tuple) -> None:
    model, _ = tiny
    eng = engine(model, eos=258)
    plain, _ = greedy(eng, max_new_tokens=12)
    penalised, _ = greedy(eng, max_new_tokens=12, repetition_penalty=1.8)
    assert penalised != plain  # the knob is connected
    assert penalised == hf_greedy(model, None, max_new_tokens=12, repetition_penalty=1.8)


def test_repetition_penalty_keeps_the_documented_logprobs(tiny: tuple) -> None:
    """Log-probs stay those of the model's temperature-scaled distribution (what the trainer recomputes)."""
    model, _ = tiny
    g = engine(model, eos=258).generate([PROMPT], SamplingParams(max_new_tokens=8, temperature=0.8, seed=1,
                                                                 repetition_penalty=1.5))[0]
    with torch.no_grad():
        lp = (model(torch.tensor([PROMPT + g.token_ids])).logits[0] / 0.8).log_softmax(-1)
    expected = [lp[len(PROMPT) - 1 + i, tok].item() for i, tok in enumerate(g.token_ids)]
    assert g.logprobs == pytest.approx(expected, abs=1e-4)


def test_min_new_tokens_defers_eos_like_transformers(tiny: tuple) -> None:
    model, _ = tiny
    first = greedy(engine(model, eos=258), max_new_tokens=6)[0][0]
    eng = engine(model, eos=first)  # greedy picks EOS at once
    assert greedy(eng, max_new_tokens=6) == ([first], "eos")
    tokens, _ = greedy(eng, max_new_tokens=6, min_new_tokens=3)
    assert len(tokens) >= 3 and first not in tokens[:3]
    assert tokens == hf_greedy(model, first, max_new_tokens=6, min_new_tokens=3)[: len(tokens)]


def test_ignore_eos_runs_to_max_new_tokens(tiny: tuple) -> None:
    model, _ = tiny
    first = greedy(engine(model, eos=258), max_new_tokens=6)[0][0]
    tokens, reason = greedy(engine(model, eos=first), max_new_tokens=6, ignore_eos=True)
    assert reason == "length" and len(tokens) == 6
    assert tokens == hf_greedy(model, None, max_new_tokens=6)
    # a stop token still ends the response when EOS is ignored
    tokens, reason = greedy(engine(model, eos=first), max_new_tokens=6, ignore_eos=True, stop_token_ids=[first])
    assert (tokens, reason) == ([first], "stop")


def test_stop_strings_end_at_the_completing_token(tiny: tuple) -> None:
    model, tokenizer = tiny
    eng = engine(model, eos=258, tokenizer=tokenizer)
    free, _ = greedy(eng, max_new_tokens=12)
    stop = tokenizer.decode(free[3:5])  # text that the unconstrained run completes at token 5 at the latest
    assert stop
    cut = next(k for k in range(1, len(free) + 1) if stop in tokenizer.decode(free[:k]))
    tokens, reason = greedy(eng, max_new_tokens=12, stop_strings=[stop])
    assert (tokens, reason) == (free[:cut], "stop")
    with pytest.raises(ValueError, match="stop_strings"):
        engine(model, eos=258).generate([PROMPT], SamplingParams(max_new_tokens=2, stop_strings=["x"]))


def test_sampling_params_reject_bad_knobs() -> None:
    with pytest.raises(ValueError, match="min_new_tokens"):
        SamplingParams(max_new_tokens=2, min_new_tokens=3)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(max_new_tokens=2, repetition_penalty=0.0)
    with pytest.raises(ValueError, match="stop_strings"):
        SamplingParams(max_new_tokens=2, stop_strings=[""])
