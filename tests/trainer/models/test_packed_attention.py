"""Packed sequences attend per sample (trainer.models.packed_attention): the same log-probs as the
padded rows, through one causal kernel call per sample instead of a [T, T] block mask."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

from trainer.config.tiny_shapes import SIZES
from trainer.models import packed_attention
from trainer.models.batch import build_batch, response_logprobs, varlen_kwargs
from trainer.models.micro_batches import pack_rows
from trainer.models.packed_attention import VARLEN_SDPA, packing_attention


@pytest.fixture(scope="module")
def model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)  # GQA (2 query heads per key head) as in Qwen2
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=300, **SIZES["tiny"])).eval()


def batch() -> dict[str, torch.Tensor]:
    """Prompts of 3, 7, 1 tokens and responses of 5, 1, 9."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (3, 7, 1)]
    responses = [torch.randint(3, 300, (n,), generator=g).tolist() for n in (5, 1, 9)]
    return build_batch(prompts, responses, pad_token_id=0)


def test_varlen_kwargs_are_the_sample_bounds() -> None:
    packed = pack_rows(batch())  # samples of 3 + 5, 7 + 1, 1 + 9 tokens
    kwargs = varlen_kwargs(packed["packed_position_ids"])
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 8, 16, 26] and kwargs["cu_seq_lens_q"].dtype == torch.int32
    assert kwargs["max_length_q"] == kwargs["max_length_k"] == 10


def test_each_sample_attends_alone_and_matches_the_padded_rows(model: Qwen2ForCausalLM,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rows = batch()
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        padded = response_logprobs(model, rows, 1.0)
    calls: list[tuple[int, bool]] = []

    def spy(query: torch.Tensor, *args: object, is_causal: bool = False, **kwargs: object) -> torch.Tensor:
        calls.append((query.size(2), is_causal))
        return F.scaled_dot_product_attention(query, *args, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(packed_attention, "F", types.SimpleNamespace(scaled_dot_product_attention=spy))
    model.set_attn_implementation(VARLEN_SDPA)
    try:
        with torch.no_grad():
            packed = response_logprobs(model, pack_rows(rows), 1.0)
            unpacked = response_logprobs(model, rows, 1.0)  # no bounds given: transformers' sdpa, unchanged
    finally:
        model.set_attn_implementation("sdpa")
    layers = model.config.num_hidden_layers
    # one causal call per sample and layer, each over that sample's tokens only: no dense mask
    assert calls == [(8, True), (8, True), (10, True)] * layers
    mask = rows["response_mask"].bool()
    assert torch.allclose(packed[mask], padded[mask], atol=2e-6)
    assert torch.equal(unpacked, padded)


def test_a_packing_role_keeps_flash_and_eager_kernels() -> None:
    assert packing_attention(None) == packing_attention("sdpa") == VARLEN_SDPA
    assert packing_attention("eager") == "eager"
    assert packing_attention("flash_attention_2") == "flash_attention_2"
