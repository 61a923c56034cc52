"""The same numbers on a CUDA device as on the CPU (run on the GPU machine)."""

from __future__ import annotations

import pytest
import torch
from algo_testing import generator, ragged_mask, random_group_ids

from trainer.algorithms.advantages import ADV_ESTIMATORS, compute_advantages
from trainer.algorithms.kl import token_kl
from trainer.algorithms.policy_loss import POLICY_LOSSES
from trainer.algorithms.rewards import normalize_rewards

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def inputs(device: str) -> dict[str, torch.Tensor]:
    g = generator(3)
    batch, length = 16, 12
    tensors = {
        "mask": ragged_mask(g, batch, length),
        "rewards": torch.randn(batch, length, generator=g),
        "values": torch.randn(batch, length, generator=g),
        "log_probs": -torch.rand(batch, length, generator=g),
        "old_log_probs": -torch.rand(batch, length, generator=g),
        "group_ids": random_group_ids(g, batch),
        "scores": torch.randn(batch, generator=g),
    }
    return {name: t.to(device) for name, t in tensors.items()}


def everything(x: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    results = []
    for name in ADV_ESTIMATORS:
        out = compute_advantages(
            name,
            x["rewards"],
            x["mask"],
            group_ids=x["group_ids"],
            values=x["values"],
            baseline_rewards=x["scores"],
            gamma=0.9,
            lambd=0.95,
        )
        results += [out.advantages, out.returns]
    for name, loss_fn in POLICY_LOSSES.items():
        extra = (x["scores"],) if name.startswith("topr") else ()
        results.append(loss_fn(x["log_probs"], x["old_log_probs"], x["rewards"], x["mask"], *extra).loss)
    results.append(
        token_kl("low_var_kl", x["mask"], log_probs=x["log_probs"], ref_log_probs=x["old_log_probs"])
    )
    normalized, _ = normalize_rewards(
        x["scores"], norm_mean_type="group", norm_std_type="running", group_ids=x["group_ids"]
    )
    results.append(normalized)
    return results


def test_cuda_matches_cpu() -> None:
    on_cpu = everything(inputs("cpu"))
    on_cuda = everything(inputs("cuda"))
    for cpu_value, cuda_value in zip(on_cpu, on_cuda, strict=True):
        assert cuda_value.device.type == "cuda"
        torch.testing.assert_close(cuda_value.cpu(), cpu_value, rtol=1e-4, atol=1e-5)
