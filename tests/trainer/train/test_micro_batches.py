"""The micro-batch plans of trainer.models.micro_batches, checked against hand calculations, and the
ranks' agreement on their count (two gloo processes). The equality of losses, gradients, log-probs
and values with the padded batch is checked through the roles (tests/trainer/roles/
test_micro_batching_roles.py)."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from trainer.models.batch import PACKED_IDS, PACKED_INDEX, PACKED_POSITIONS, build_batch
from trainer.models.micro_batches import (
    MicroBatching,
    balanced_groups,
    load_balance_groups,
    micro_batch,
    pack_rows,
    plan_groups,
    split_to_count,
    token_budget_groups,
    trim_padding,
)


def test_token_budget_follows_roll_rows_times_padded_length() -> None:
    """(p, r) = (3,4) (2,1) (5,7) (1,2), budget 24, round 4. Sorted by p + r: rows 1 (3), 3 (3), 0 (7), 2 (12).
    {1}: 1 × ⌈3⌉₄ = 4; {1,3}: 2 × ⌈2+2⌉₄ = 8; {1,3,0}: 3 × ⌈3+4⌉₄ = 24 ≤ 24; {1,3,0,2}: 4 × ⌈5+7⌉₄ = 48 > 24."""
    assert token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 24, round_to=4) == [[1, 3, 0], [2]]
    # the same rows with round 1: {1,3,0} costs 3 × 7 = 21, and row 2 alone 12: still two
    assert token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 24, round_to=1) == [[1, 3, 0], [2]]
    # budget 20 with round 4: {1,3,0} = 24 > 20, so row 0 opens the next micro-batch: {0}: 8, {0,2}: 2 × 12 = 24 > 20
    assert token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 20, round_to=4) == [[1, 3], [0], [2]]


def test_token_budget_follows_verl_real_tokens() -> None:
    """Σ real tokens ≤ 10: sorted lengths 3, 3, 7, 12 → {3, 3} (6; +7 = 13 > 10), {7}; 12 alone is over."""
    with pytest.raises(ValueError, match=r"actor_train.max_token_len_per_gpu=10 is below one sample's 12 tokens"):
        token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 10, cost="real", field="actor_train.max_token_len_per_gpu")
    assert token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 13, cost="real") == [[1, 3, 0], [2]]
    assert token_budget_groups([3, 2, 5, 1], [4, 1, 7, 2], 12, cost="real") == [[1, 3], [0], [2]]


def test_load_balance_spreads_tokens_longest_first() -> None:
    """Lengths 7 3 12 3 8 (Σ 33), cap 16 → k = ⌈33/16⌉ = 3: 12 → A, 8 → B, 7 → C, 3 → C (10), 3 → B (11)."""
    assert load_balance_groups([7, 3, 12, 3, 8], 16, 1) == [[2], [3, 4], [0, 1]]
    # k = 2: 12 → A, 8 → B, 7 → B (15), 3 → A (15), 3 → A (tie: the first): 18 and 15
    assert balanced_groups([7, 3, 12, 3, 8], 2) == [[1, 2, 3], [0, 4]]
    # cap 15: k = 3 works as above (12, 11, 10); cap 11: k = 3 gives 12 > 11 → refused, one row is too long
    with pytest.raises(ValueError, match="max_packed_sequence_length_train=11 is below one sample's 12 tokens"):
        load_balance_groups([7, 3, 12, 3, 8], 11, 1, field="max_packed_sequence_length_train")
    assert len(load_balance_groups([7, 3, 12, 3, 8], None, 4)) == 4  # min_num_micro_batches, no cap


def test_split_to_count_halves_the_largest_and_pads_with_empty_groups() -> None:
    assert split_to_count([[0, 1, 2], [3]], 3) == [[0], [1, 2], [3]]
    assert split_to_count([[0, 1, 2], [3]], 4) == [[0], [1], [2], [3]]
    assert split_to_count([[0], [1]], 3) == [[0], [1], []]


def rows() -> dict[str, torch.Tensor]:
    """Prompts of 2, 3, 1 tokens (P = 3), responses of 1, 4, 2 (R = 4)."""
    batch = build_batch([[11, 12], [21, 22, 23], [31]], [[13], [24, 25, 26, 27], [32, 33]], pad_token_id=0)
    batch["advantages"] = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    batch["scores"] = torch.tensor([1.0, 2.0, 3.0])
    return batch


def test_trim_keeps_the_columns_some_row_needs() -> None:
    part = trim_padding({k: v[[0, 2]] for k, v in rows().items()})  # rows 0 and 2: max p 2, max r 2
    assert part["input_ids"].tolist() == [[11, 12, 13, 0], [0, 31, 32, 33]]
    assert part["position_ids"].tolist() == [[0, 1, 2, 2], [0, 0, 1, 2]]  # kept as build_batch made them
    assert part["advantages"].tolist() == [[0.0, 1.0], [8.0, 9.0]] and part["scores"].tolist() == [1.0, 3.0]
    # rounded to 8: response width 8 - 2 = 6, capped at R = 4
    assert trim_padding({k: v[[0, 2]] for k, v in rows().items()}, round_to=8)["advantages"].shape == (2, 4)


def test_pack_concatenates_real_tokens_and_indexes_each_response() -> None:
    packed = pack_rows(rows())
    assert packed[PACKED_IDS].tolist() == [[11, 12, 13, 21, 22, 23, 24, 25, 26, 27, 31, 32, 33]]
    assert packed[PACKED_POSITIONS].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2]]
    # response token j of row i is predicted at packed position start_i + p_i - 1 + j (0 past the response)
    assert packed[PACKED_INDEX].tolist() == [[1, 0, 0, 0], [5, 6, 7, 8], [10, 11, 0, 0]]


def test_micro_batch_with_packing_only_does_not_round() -> None:
    spec = MicroBatching(rows=2, pack=True, round_to=8)
    part = micro_batch(rows(), [1, 2], spec)
    assert part[PACKED_IDS].shape == (1, 10) and part["response_mask"].shape == (2, 4)
    assert plan_groups(rows(), spec) == [[0, 1], [2]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agree(rank: int, port: int, queue: mp.Queue) -> None:
    """Budget 64 (rows × padded length): rank 0's 4 rows of 2 + 3 tokens fit one micro-batch (4 × 5 = 20),
    rank 1's rows of 2 + 30 go two by two (2 × 32 = 64): both cut two, rank 0 by halving its micro-batch. A
    forward pass of 1 row on rank 0 and 4 on rank 1 runs twice on both: rank 0's second pass is a filler
    (its first row again, the result dropped)."""
    import torch.distributed as dist

    from trainer.roles.common import forward_micro_batches
    from trainer.train.base import DataParallel, PlainForward
    from trainer.train.ppo_update import cut_micro_batches

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        length = 3 if rank == 0 else 30
        batch = build_batch([[5, 6]] * 4, [[7] * length] * 4, pad_token_id=0)
        spec = MicroBatching(rows=4, max_tokens=64, round_to=1)
        micro = cut_micro_batches(batch, spec, DataParallel(rank, 2))
        calls: list[int] = []

        class Probe(torch.nn.Module):
            def forward(self, **kwargs):
                raise AssertionError("not called")

        strategy = PlainForward(Probe())

        def fn(model, part):
            calls.append(part["input_ids"].size(0))
            return part["response_mask"]

        rows_here = 1 if rank == 0 else 4
        forward_batch = {k: v[:rows_here] for k, v in batch.items()}
        out = forward_micro_batches(fn, strategy, forward_batch, spec)
        queue.put((rank, [m["input_ids"].size(0) for m in micro], calls, out.sum().item()))
    finally:
        dist.destroy_process_group()


def test_ranks_agree_on_the_micro_batch_count() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=agree, args=(rank, port, queue)) for rank in range(2)]
    for p in procs:
        p.start()
    results = dict((r, rest) for r, *rest in (queue.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
    assert results[0][0] == [2, 2] and results[1][0] == [2, 2]
    assert results[0][1] == [1, 1] and results[1][1] == [2, 2]
    assert results[0][2] == 3.0 and results[1][2] == 4 * 30.0  # the filler's output is dropped
