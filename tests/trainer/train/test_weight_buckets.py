"""Weights handed from a trainer to an engine in the same process: bucketed, in the engine's dtype,
on its device, without a copy where nothing needs converting."""

from __future__ import annotations

import torch

from tests.trainer.train.tiny_qwen import tiny_qwen2
from trainer.rollout.hf import HFInferEngine
from trainer.train import OptimConfig, build_strategy
from trainer.train.base import weight_buckets


def test_buckets_hold_at_most_the_budget_and_a_larger_tensor_alone() -> None:
    named = [("a", torch.zeros(10)), ("b", torch.zeros(10)), ("big", torch.zeros(100)), ("c", torch.zeros(5)),
             ("ids", torch.zeros(4, dtype=torch.long))]
    buckets = list(weight_buckets(named, device=torch.device("cpu"), dtype=torch.bfloat16, bucket_bytes=48))
    # bf16: a, b = 20 B each; big = 200 B (alone, over budget); c = 10 B; ids stay int64 (32 B)
    assert [list(b) for b in buckets] == [["a", "b"], ["big"], ["c", "ids"]]
    assert buckets[0]["a"].dtype == torch.bfloat16 and buckets[2]["ids"].dtype == torch.long


def test_nothing_to_convert_means_no_copy() -> None:
    weight = torch.randn(3, 3)
    (bucket,) = weight_buckets([("w", weight)], device=torch.device("cpu"), dtype=torch.float32, bucket_bytes=1 << 20)
    assert bucket["w"].data_ptr() == weight.data_ptr()


def test_an_engine_loaded_bucket_by_bucket_holds_the_trainers_weights() -> None:
    strategy = build_strategy("torch_train", tiny_qwen2(0), OptimConfig(lr=1e-2, num_training_steps=2))
    engine = HFInferEngine(tiny_qwen2(1).to(torch.bfloat16), eos_token_ids=[0], pad_token_id=0)
    buckets = list(strategy.full_weights(device="cpu", dtype=torch.bfloat16, bucket_bytes=8192))
    assert len(buckets) > 2 and max(sum(t.nbytes for t in b.values()) for b in buckets if len(b) > 1) <= 8192
    for bucket in buckets:
        engine.load_weights(bucket)
    for name, value in strategy.model.state_dict().items():
        assert torch.equal(engine.model.state_dict()[name], value.to(torch.bfloat16)), name
