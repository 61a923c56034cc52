"""Every strategy puts the rows it is handed on its own device, in one shared place.

The first CUDA run died at step 1: the workers handed CPU rows to `forward_no_grad`, which passed them
to a model on cuda:0. This machine has no GPU, so a strategy is placed on the `meta` device instead:
its parameters live there, the pipeline's batches on the CPU, and a probe model refuses inputs that
are not where its weights are, exactly as a CUDA model does.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import Tensor, nn

from trainer.models.batch import build_batch
from trainer.models.value import response_values
from trainer.roles.common import forward_in_chunks, logprobs_fn
from trainer.train import OptimConfig, build_forward_strategy, build_strategy
from trainer.train.base import StrategyBase

VOCAB = 11


class WhereAreMyInputs(nn.Module):
    """A policy stand-in that, like a model on a GPU, refuses inputs on another device than its
    weights. Its log-probs (uniform over VOCAB tokens) are built on the CPU so the caller can read
    them: tensors on `meta` hold no values."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(VOCAB))
        self.devices: list[torch.device] = []

    def response_logprobs(self, batch: dict[str, Tensor], temperature: float) -> Tensor:
        for name, tensor in batch.items():
            if tensor.device != self.weight.device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but {name} is on "
                                   f"{tensor.device}, the weights on {self.weight.device}")
        self.devices.append(batch["input_ids"].device)
        return torch.full(batch["response_mask"].shape, -torch.log(torch.tensor(float(VOCAB))).item())


def cpu_batch() -> dict[str, Tensor]:
    return build_batch([[1, 2, 3], [4, 5]], [[6, 7], [8]], pad_token_id=0)


@pytest.mark.parametrize("build", [
    lambda model: build_strategy("torch_train", model, OptimConfig(), device="meta"),
    lambda model: build_forward_strategy("hf_infer", model, device="meta"),
    lambda model: build_forward_strategy("torch_train", model, device="meta"),
], ids=["torch_train", "hf_infer-forward", "torch_train-forward"])
def test_log_probs_of_cpu_rows_run_on_the_strategys_device(build) -> None:
    model = WhereAreMyInputs()
    strategy = build(model)
    logprobs = forward_in_chunks(logprobs_fn(1.0), strategy, cpu_batch(), chunk=1)
    assert logprobs.device.type == "cpu" and logprobs.shape == (2, 2)
    torch.testing.assert_close(logprobs, torch.full((2, 2), -torch.log(torch.tensor(float(VOCAB)))))
    assert model.devices == [torch.device("meta")] * 2  # one forward per chunk of one row


def test_values_of_cpu_rows_run_on_the_strategys_device() -> None:
    class ValueProbe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1))

        def forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor) -> Tensor:
            assert input_ids.device == attention_mask.device == position_ids.device == self.weight.device
            return torch.ones(input_ids.shape)

    strategy = build_strategy("torch_train", ValueProbe(), OptimConfig(), device="meta")
    values = forward_in_chunks(response_values, strategy, cpu_batch(), chunk=0)
    assert torch.equal(values, torch.ones(2, 2))


STRATEGY_CLASSES = [
    ("trainer.train.base", "PlainForward"),
    ("trainer.train.torch_strategy", "TorchStrategy"),
    ("trainer.train.fsdp2_strategy", "FSDP2Strategy"),
    ("trainer.train.fsdp2_strategy", "FSDP2Forward"),
    ("trainer.train.deepspeed_strategy", "DeepSpeedStrategy"),
    ("trainer.train.deepspeed_strategy", "DeepSpeedForward"),
    ("trainer.train.megatron_strategy", "MegatronStrategy"),
    ("trainer.train.megatron_strategy", "MegatronForward"),
]


@pytest.mark.parametrize(("module", "name"), STRATEGY_CLASSES, ids=[n for _, n in STRATEGY_CLASSES])
def test_every_strategy_places_inputs_through_the_shared_skeleton(module: str, name: str) -> None:
    """fsdp2/deepspeed/megatron cannot be put on another device than the CPU here (gloo, no CUDA):
    what guards them is that none writes its own forward_no_grad or train-time placement."""
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, StrategyBase)
    own = [klass for klass in cls.__mro__ if klass is not StrategyBase and "forward_no_grad" in vars(klass)]
    assert not own, f"{name} defines its own forward_no_grad in {own}: inputs must be placed by StrategyBase"
