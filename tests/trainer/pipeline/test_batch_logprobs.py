"""Log-probs taken to fp32 a few rows at a time: the same numbers,
bit for bit, as the whole-sequence fp32 computation they replace (the demo's trajectories depend on it)."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.train.tiny_qwen import tiny_qwen2
from trainer.models.batch import build_batch, response_logprobs


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("rows_per_chunk", [1, 3, 64])
def test_chunked_logprobs_equal_the_full_fp32_log_softmax(temperature: float, rows_per_chunk: int) -> None:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 300, (n,), generator=generator).tolist() for n in (5, 9, 7, 3, 8)]
    responses = [torch.randint(1, 300, (n,), generator=generator).tolist() for n in (4, 2, 6, 5, 1)]
    batch = build_batch(prompts, responses, pad_token_id=0)
    model = tiny_qwen2(0).eval()
    width = batch["response_mask"].size(1)
    with torch.no_grad():
        # the reference: every position's logits, then the response's slice, in fp32 at once
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits[:, -width - 1 : -1].float()
        logits = logits / temperature if temperature > 0 else logits
        expected = logits.log_softmax(-1).gather(-1, batch["input_ids"][:, -width:, None]).squeeze(-1)
        got = response_logprobs(model, batch, temperature, rows_per_chunk=rows_per_chunk)
    assert torch.equal(got, expected)
