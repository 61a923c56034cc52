"""One LR write and one non-finite skip for every strategy (trainer.train.base.write_lr and
step_unless_non_finite, issue 42): what they do, and that no strategy writes the LR or skips by itself."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from trainer.train.base import OptimConfig, step_unless_non_finite, write_lr

REPO = Path(__file__).resolve().parents[3]


def test_write_lr_sets_every_group_to_the_scheduled_value() -> None:
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    optimizer = torch.optim.SGD([{"params": params[:1]}, {"params": params[1:]}], lr=0.5)
    optim = OptimConfig(lr=0.1, warmup_steps=4, lr_scheduler_type="constant", num_training_steps=10)
    assert write_lr(optimizer, optim, 1) == 0.1 * 1 / 4  # warmup: s / W, by hand
    assert [group["lr"] for group in optimizer.param_groups] == [0.025, 0.025]
    assert write_lr(optimizer, optim, 7) == 0.1


def test_a_non_finite_norm_discards_and_a_finite_one_applies() -> None:
    calls: list[str] = []
    for norm in (1.5, math.nan, math.inf, torch.tensor(float("-inf")), torch.tensor(2.0)):
        out = step_unless_non_finite(norm, 0.01, apply=lambda: calls.append("apply"),
                                     discard=lambda: calls.append("discard"))
        assert out["lr"] == 0.01 and out["update_skipped"] == float(not math.isfinite(float(norm)))
    assert calls == ["apply", "discard", "discard", "discard", "apply"]


def test_no_strategy_writes_the_lr_or_skips_by_itself() -> None:
    """`group["lr"] =` appears only in write_lr; every strategy calls write_lr, and the ones that measure the
    norm themselves call step_unless_non_finite."""
    train = REPO / "trainer" / "train"
    writers = [path.name for path in train.glob("*.py") if re.search(r"\[\s*[\"']lr[\"']\s*\]\s*=", path.read_text())]
    assert writers == ["base.py"]
    for name in ("base.py", "deepspeed_strategy.py", "megatron_strategy.py"):
        text = (train / name).read_text()
        assert "write_lr(" in text and "step_unless_non_finite(" in text, name
