"""LoRA on megatron_train in the RLVR loop (decision 0054), local backend, megatron-core's CUDA calls on the
CPU (tests/trainer/train/megatron_testing.py): two steps with adapters on every linear layer equal torch_train's
LoRA run — the second step's rollouts come from the merged weights the engine received after the first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import load_cfg, metrics_by_step, run_local
from tests.trainer.train.megatron_testing import emulated_cuda

pytest.importorskip("megatron.core")

LORA = (
    "actor_train.model_args.lora_target=all-linear",
    "actor_train.model_args.lora_rank=4",
    "actor_train.model_args.lora_alpha=8",
    "actor_train.training_args.learning_rate=0.05",
)
COMMON = ("seed=7", "eval_steps=0", "max_steps=2", "save_steps=1000", *LORA)


def test_two_lora_steps_on_megatron_equal_torch_train(tmp_path: Path) -> None:
    assert run_local(load_cfg(tmp_path / "torch", *COMMON)) == 0
    with emulated_cuda():
        megatron = load_cfg(
            tmp_path / "megatron", *COMMON, "actor_train.strategy_args.strategy_name=megatron_train"
        )
        assert run_local(megatron) == 0
    torch_run, megatron_run = metrics_by_step(tmp_path / "torch"), metrics_by_step(tmp_path / "megatron")
    for step in (1, 2):
        one, two = torch_run[step], megatron_run[step]
        assert one["reward/mean"] == two["reward/mean"], step  # the same rollouts
        for key in ("actor/loss", "actor/grad_norm", "actor/entropy"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (step, key)
    assert torch_run[2]["actor/loss"] != torch_run[1]["actor/loss"]
