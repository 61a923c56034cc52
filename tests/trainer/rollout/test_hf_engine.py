"""hf_infer: KV-cached, left-padded sampling agrees with a plain full forward pass."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.rollout.base import SamplingParams
from trainer.rollout.hf import HFInferEngine, filter_logits, gumbel_sample, token_mask

VOCAB, EOS, PAD = 32, 1, 0


@pytest.fixture(scope="module")
def model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        eos_token_id=EOS, pad_token_id=PAD,
    )
    return Qwen2ForCausalLM(cfg).eval()


def engine(model: Qwen2ForCausalLM) -> HFInferEngine:
    return HFInferEngine(model, eos_token_ids=[EOS], pad_token_id=PAD)


PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]


def test_logprobs_match_full_forward_with_left_padding(model: Qwen2ForCausalLM) -> None:
    params = SamplingParams(max_new_tokens=6, temperature=0.7, n=2, seed=3)
    gens = engine(model).generate(PROMPTS, params)
    assert [(g.prompt_index, g.sample_index) for g in gens] == [(p, s) for p in range(3) for s in range(2)]
    for g in gens:
        full = torch.tensor([PROMPTS[g.prompt_index] + g.token_ids])
        with torch.no_grad():
            logits = model(full).logits[0].float() / 0.7
        lp = logits.log_softmax(-1)
        start = len(PROMPTS[g.prompt_index])
        expected = [lp[start - 1 + i, tok].item() for i, tok in enumerate(g.token_ids)]
        assert g.logprobs == pytest.approx(expected, abs=1e-4)


def test_seeded_calls_reproduce_and_differ_by_seed(model: Qwen2ForCausalLM) -> None:
    eng = engine(model)
    a = eng.generate(PROMPTS, SamplingParams(max_new_tokens=8, n=4, seed=1))
    b = eng.generate(PROMPTS, SamplingParams(max_new_tokens=8, n=4, seed=1))
    c = eng.generate(PROMPTS, SamplingParams(max_new_tokens=8, n=4, seed=2))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_stop_reasons_and_greedy(model: Qwen2ForCausalLM) -> None:
    eng = engine(model)
    greedy = eng.generate(PROMPTS, SamplingParams(max_new_tokens=5, temperature=0.0))
    assert all(g.stop_reason in ("eos", "length") for g in greedy)
    # make token 7 the stop token of whatever greedy picks first for prompt 0
    first = greedy[0].token_ids[0]
    stopped = eng.generate(PROMPTS, SamplingParams(max_new_tokens=5, temperature=0.0, stop_token_ids=[first]))
    assert stopped[0].token_ids == [first] and stopped[0].stop_reason in ("stop", "eos")
    lengthy = [g for g in greedy if g.stop_reason == "length"]
    assert all(len(g.token_ids) == 5 for g in lengthy)
    # EOS as the only allowed token: every sample ends at once with reason "eos"
    eos_model = HFInferEngine(model, eos_token_ids=[first], pad_token_id=PAD)
    assert eos_model.generate([PROMPTS[0]], SamplingParams(max_new_tokens=5, temperature=0.0))[0].stop_reason == "eos"


def test_load_weights_changes_outputs_and_rejects_unknown_names(model: Qwen2ForCausalLM) -> None:
    import copy

    eng = engine(copy.deepcopy(model))
    before = eng.generate(PROMPTS, SamplingParams(max_new_tokens=4, temperature=0.0))
    new = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    eng.load_weights(new)
    after = eng.generate(PROMPTS, SamplingParams(max_new_tokens=4, temperature=0.0))
    assert [g.token_ids for g in before] != [g.token_ids for g in after]
    with pytest.raises(KeyError, match="unknown parameter"):
        eng.load_weights({"not.a.weight": torch.zeros(1)})
    eng.sleep()
    with pytest.raises(RuntimeError, match="asleep"):
        eng.generate(PROMPTS, SamplingParams(max_new_tokens=2))
    eng.wake()
    assert len(eng.generate(PROMPTS, SamplingParams(max_new_tokens=2))) == 3


def test_filter_logits_top_k_top_p_min_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0, 0.0)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, -1, 0.8, 0.0)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, -1, 0.81, 0.0)).tolist() == [[False, False, False, True]]
    assert torch.isinf(filter_logits(logits, -1, 1.0, 0.5)).tolist() == [[False, False, True, True]]
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(max_new_tokens=1, top_p=0.0)


def test_gumbel_sample_draws_what_torch_multinomial_draws() -> None:
    """The accelerator path's sampler makes torch.multinomial's own draws (checked on CPU, where both run)."""
    probs = torch.rand((16, 50), generator=torch.Generator().manual_seed(0)) ** 4
    probs /= probs.sum(-1, keepdim=True)
    for seed in range(5):
        expected = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed)).squeeze(-1)
        assert torch.equal(gumbel_sample(probs, torch.Generator().manual_seed(seed)), expected)


def test_checking_for_finished_rows_every_8_steps_only_adds_padding(model: Qwen2ForCausalLM) -> None:
    """The accelerator cadence (check "all rows finished" every 8 steps), run on CPU: extra steps
    after every row finished change no result of a single batch."""
    params = SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=list(range(2, 12)))
    eng = engine(model)
    expected = eng.generate(PROMPTS, params)
    assert {g.stop_reason for g in expected} == {"stop"} and max(len(g.token_ids) for g in expected) < 8
    eng.check_every = 8
    assert eng.generate(PROMPTS, params) == expected


def test_ids_outside_the_vocabulary_never_end_a_row(model: Qwen2ForCausalLM) -> None:
    assert token_mask(torch.tensor([-1, 2, VOCAB + 5]), VOCAB).nonzero().flatten().tolist() == [2]
    eng = HFInferEngine(model, eos_token_ids=[EOS, VOCAB + 100], pad_token_id=PAD)
    gens = eng.generate(PROMPTS, SamplingParams(max_new_tokens=4, min_new_tokens=2, stop_token_ids=[-1], seed=0))
    assert all(len(g.token_ids) >= 2 for g in gens)
