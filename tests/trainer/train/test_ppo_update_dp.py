"""The PPO update over data-parallel ranks (trainer.train.ppo_update): each rank divides its loss by the
mini-batch's token count summed over the ranks, so ranks holding different numbers of real tokens still
train on the token mean of the whole batch (issue 45). Two gloo processes, fsdp2_train on CPU."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from torch import Tensor, nn

from trainer.config.topology import TrainShape
from trainer.models.batch import build_batch, response_logits, token_logprobs
from trainer.train.ppo_update import Normalisers

RESPONSE_LENGTHS = ([2, 1, 2, 1], [9, 8, 9, 7])  # rank 0: 6 real tokens, rank 1: 33


def rank_batch(rank: int) -> dict[str, Tensor]:
    generator = torch.Generator().manual_seed(rank)
    responses = [torch.randint(1, 300, (n,), generator=generator).tolist() for n in RESPONSE_LENGTHS[rank]]
    return build_batch([[5, 6, 7]] * 4, responses, pad_token_id=0)


def response_nll(model: nn.Module, mb: dict[str, Tensor]) -> Tensor:
    """Σ over real response tokens of −log π(token)."""
    ids = mb["input_ids"][:, -mb["response_mask"].size(1):]
    return -(token_logprobs(response_logits(model, mb, 1.0), ids) * mb["response_mask"]).sum()


def token_mean(model: nn.Module, mb: dict[str, Tensor], *, norm: Normalisers) -> tuple[Tensor, dict[str, float]]:
    """A token-mean loss over the normaliser ppo_update passes (the global token count)."""
    return response_nll(model, mb) / norm.tokens, {}


def update_on_rank(rank: int, port: int, queue: mp.Queue) -> None:
    from tests.trainer.train.tiny_qwen import tiny_qwen2
    from trainer.cluster import distributed
    from trainer.train import OptimConfig, build_strategy
    from trainer.train.ppo_update import ppo_update

    torch.set_num_threads(1)
    distributed.init_process_group(rank=rank, world_size=2, master_addr="127.0.0.1", master_port=port)
    try:
        strategy = build_strategy("fsdp2_train", tiny_qwen2(0), OptimConfig(lr=1e-3), rank=rank, world_size=2)
        shape = TrainShape(role="actor_train", dp=2, micro_batch=4, grad_accum=1, samples=8, ppo_epochs=1)
        metrics = ppo_update(strategy, rank_batch(rank), shape, token_mean, seed=0, step=1)
        queue.put((rank, metrics["loss"]))
    finally:
        distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ranks_with_different_token_counts_train_on_the_whole_batchs_token_mean() -> None:
    from tests.trainer.train.tiny_qwen import tiny_qwen2

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=update_on_rank, args=(rank, port, queue)) for rank in range(2)]
    for p in procs:
        p.start()
    losses = dict(queue.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    model = tiny_qwen2(0)
    with torch.no_grad():
        sums = [float(response_nll(model, rank_batch(rank))) for rank in range(2)]
    whole = sum(sums) / sum(sum(lengths) for lengths in RESPONSE_LENGTHS)  # Σ NLL / 39 tokens
    # each rank reports its share × the data-parallel size: their mean is the objective of the step
    assert (losses[0] + losses[1]) / 2 == pytest.approx(whole, rel=1e-4)
    assert losses[0] == pytest.approx(2 * sums[0] / 39, rel=1e-4)  # 6 of 39 tokens, not 6 of 6
