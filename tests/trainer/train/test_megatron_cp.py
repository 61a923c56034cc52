"""Megatron context parallelism (all-gather-KV attention, trainer.train.megatron_cp; docs/decisions/0058):
the zigzag split is megatron's own and inverts exactly; the attention of each simulated rank's queries
equals full causal attention (torch's scaled_dot_product_attention); two gloo ranks with
context_parallel_size 2 compute the HF model's log-probs and values, one training step lands on
torch_train's weights — so the gradient reduction over the data-parallel-with-CP group scales right — and
their distributed checkpoint resumes exactly.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.trainer.train.megatron_testing import (
    emulated_cuda,
    nll_loss,
    rollout_batch,
    run_ranks,
    tiny_causal_lm,
)
from trainer.models.value import ValueModel, response_values
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_forward_strategy, build_strategy
from trainer.train.megatron_cp import (
    ContextParallel,
    attend,
    split_sequence,
    unsplit_sequence,
    zigzag_positions,
)

pytest.importorskip("megatron.core")

# no clipping: a gradient off by the CP size would change the step itself, not only the reported norm
SGD = OptimConfig(lr=0.1, optimizer="sgd", max_grad_norm=None, num_training_steps=10)
TEMPERATURE = 0.7


# --------------------------------------------------------------------------------------------
# one process, simulated ranks


def test_zigzag_positions_are_megatrons_and_the_split_inverts() -> None:
    # 2·cp = 4 chunks of 2 positions: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 (by hand)
    assert zigzag_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert zigzag_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    from megatron.core.models.common.embeddings.rope_utils import get_pos_emb_on_this_cp_rank

    positions = torch.arange(24.0)[:, None]  # megatron's rotary embedding keeps these rows on a CP rank
    for cp in (2, 3):
        for rank in range(cp):
            group = SimpleNamespace(size=lambda cp=cp: cp, rank=lambda rank=rank: rank)
            with emulated_cuda():
                kept = get_pos_emb_on_this_cp_rank(positions, 0, group)
            assert kept[:, 0].long().tolist() == zigzag_positions(24, cp, rank).tolist()
    tensor = torch.randn(3, 12, 5)
    for cp in (1, 2, 3):
        parts = [split_sequence(tensor, ContextParallel(cp, r), dim=1) for r in range(cp)]
        assert all(part.shape == (3, 12 // cp, 5) for part in parts)
        assert torch.equal(unsplit_sequence(parts, dim=1), tensor)
    with pytest.raises(ValueError, match="not a multiple of 2·cp = 4"):
        zigzag_positions(10, 2, 0)


@pytest.mark.parametrize("cp", [2, 3])
def test_each_ranks_attention_equals_full_causal_attention(cp: int) -> None:
    generator = torch.Generator().manual_seed(0)
    seq, batch, heads, kv_heads, dim = 12, 3, 4, 2, 8
    q = torch.randn(seq, batch, heads, dim, generator=generator)
    k, v = (torch.randn(seq, batch, kv_heads, dim, generator=generator) for _ in range(2))
    tokens = torch.ones(batch, seq, dtype=torch.bool)
    tokens[1, 9:] = False  # right padding
    tokens[2, :3] = False  # left padding
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    allowed = causal[None, None] & tokens[:, None, None, :]  # [b, 1, s, s] True = attend
    scale = dim**-0.5
    # the reference: torch's attention over the whole sequence, [b, h, s, d] layout
    expected = (
        torch.nn.functional.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3),
            k.permute(1, 2, 0, 3),
            v.permute(1, 2, 0, 3),
            attn_mask=allowed,
            scale=scale,
            enable_gqa=True,
        )
        .permute(2, 0, 1, 3)
        .reshape(seq, batch, heads * dim)
    )
    outputs = []
    for rank in range(cp):
        place = ContextParallel(cp, rank)
        # what a rank holds: its query positions and its rows of the mask; the keys gathered whole
        local = attend(split_sequence(q, place, 0), k, v, split_sequence(~allowed, place, 2), scale)
        outputs.append(local)
        real = split_sequence(tokens, place, 1).T  # [s / cp, b]: a left-padded query sees no key
        torch.testing.assert_close(local[real], split_sequence(expected, place, 0)[real], rtol=0, atol=1e-6)
    # the padding rows too (megatron's fill value: a fully masked row averages the values)
    torch.testing.assert_close(
        unsplit_sequence(outputs, 0), attend(q, k, v, ~allowed, scale), rtol=0, atol=1e-6
    )


# --------------------------------------------------------------------------------------------
# two ranks, context_parallel_size 2 (spawned processes over gloo)

CP2 = {"context_parallel_size": 2}


def cp_case(rank: int, world_size: int, out_dir: Path) -> dict[str, Any]:
    """Each rank is handed its own half of the batch, as the workers hand it; the CP ranks join them."""
    from megatron.core import parallel_state

    batch = rollout_batch(4, seed=5)
    mine = {k: v.chunk(world_size)[rank] for k, v in batch.items()}
    infer = build_forward_strategy(
        "megatron_infer", tiny_causal_lm("qwen2"), rank=rank, world_size=world_size, strategy_config=CP2
    )
    logprobs = forward_in_chunks(logprobs_fn(TEMPERATURE), infer, mine, chunk=2)
    parallel_state.destroy_model_parallel()
    strategy = build_strategy(
        "megatron_train", tiny_causal_lm("qwen2"), SGD, rank=rank, world_size=world_size, strategy_config=CP2
    )
    rows, own = strategy.join_model_parallel_rows(mine)
    loss_fn = nll_loss(float(batch["response_mask"].sum()))
    micro = [{k: v.chunk(2)[i] for k, v in rows.items()} for i in range(2)]
    metrics = strategy.train_step(micro, loss_fn)
    trained = strategy.full_state_dict()
    strategy.save_checkpoint(out_dir / "ckpt")  # a distributed checkpoint written by both CP ranks
    going_on = strategy.train_step(micro, loss_fn)
    strategy.load_checkpoint(out_dir / "ckpt")
    resumed = strategy.train_step(micro, loss_fn) == going_on
    parallel_state.destroy_model_parallel()
    critic = ValueModel(tiny_causal_lm("qwen2"))
    with torch.no_grad():
        critic.value_head.weight.copy_(torch.linspace(-0.2, 0.2, 32))
    values = build_strategy(
        "megatron_train", critic, SGD, rank=rank, world_size=world_size, strategy_config=CP2
    ).forward_no_grad(response_values, rows)
    parallel_state.destroy_model_parallel()
    return {
        "logprobs": logprobs,
        "rows": (len(rows["input_ids"]), own),
        "metrics": metrics,
        "trained": trained,
        "values": values,
        "resumed": resumed,
    }


def test_two_context_parallel_ranks_equal_one_process(tmp_path: Path) -> None:
    ranks = run_ranks(cp_case, 2, tmp_path, tmp_path)
    batch = rollout_batch(4, seed=5)
    assert batch["input_ids"].shape[1] % 4  # the width is padded to 2·cp chunks
    hf = tiny_causal_lm("qwen2")
    mask = batch["response_mask"]
    with torch.no_grad():
        from trainer.models.batch import response_logprobs

        expected_logprobs = response_logprobs(hf, batch, TEMPERATURE) * mask
    got = torch.cat([ranks[r]["logprobs"] for r in range(2)]) * mask
    torch.testing.assert_close(got, expected_logprobs, rtol=0, atol=1e-5)
    # the CP ranks compute on the same rows (both halves) and each answers for its own half
    assert [ranks[r]["rows"] for r in range(2)] == [(4, slice(0, 2)), (4, slice(2, 4))]
    loss_fn = nll_loss(float(mask.sum()))
    reference = build_strategy("torch_train", tiny_causal_lm("qwen2"), SGD)
    expected = reference.train_step([{k: v.chunk(2)[i] for k, v in batch.items()} for i in range(2)], loss_fn)
    expected_state = reference.full_state_dict()
    for r in range(2):  # every CP rank computed the whole loss and the same gradient norm
        assert ranks[r]["metrics"]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
        assert ranks[r]["metrics"]["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    assert ranks[0]["resumed"] and ranks[1]["resumed"]  # the checkpoint resumes exactly
    assert ranks[1]["trained"] == {}  # full weights gather on world rank 0 only
    for key, value in expected_state.items():
        torch.testing.assert_close(ranks[0]["trained"][key], value, rtol=0, atol=1e-6, msg=key)
    critic = ValueModel(tiny_causal_lm("qwen2"))
    with torch.no_grad():
        critic.value_head.weight.copy_(torch.linspace(-0.2, 0.2, 32))
        expected_values = response_values(critic, batch)
    for r in range(2):
        torch.testing.assert_close(ranks[r]["values"] * mask, expected_values * mask, rtol=0, atol=1e-5)
