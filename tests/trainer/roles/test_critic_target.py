"""The critic fits the return R = A + V (GAE's advantage plus the value it was computed from), never the
advantage alone (issue 45)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trainer.config import load_config
from trainer.models.batch import build_batch
from trainer.models.tiny import build_tiny_model
from trainer.models.value import ValueModel
from trainer.roles.actor import LossSpec
from trainer.roles.critic import critic_loss
from trainer.train.ppo_update import Normalisers

REPO = Path(__file__).resolve().parents[3]


def test_the_critic_regresses_on_the_return_not_the_advantage(tmp_path: Path) -> None:
    # a fresh value head is zero-initialised, so every predicted value is 0 and the loss is ½·mean_t R_t²
    model = ValueModel(AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", seed=1),
                                                            local_files_only=True))
    mb = build_batch([[5, 6]], [[7, 8, 9]], pad_token_id=0)
    mb["values"] = torch.tensor([[0.5, -0.25, 1.0]])  # V_old, as compute_values returned them
    mb["advantages"] = torch.tensor([[1.0, 2.0, -0.5]])  # A
    mb["returns"] = torch.tensor([[1.5, 1.75, 0.5]])  # R = A + V
    cfg = load_config(REPO / "examples" / "demo_ppo_cpu.yaml", [f"output_dir={tmp_path}", "value_clip=null",
                                                                "loss_agg_mode=token-mean"])
    loss, metrics = critic_loss(LossSpec.from_config(cfg), model, mb, norm=Normalisers(3.0, 1.0))
    assert metrics["vpred_mean"] == 0.0
    # ½·(1.5² + 1.75² + 0.5²)/3; fitting A instead would give ½·(1² + 2² + 0.5²)/3 = 0.875
    assert float(loss.detach()) == pytest.approx(0.5 * (2.25 + 3.0625 + 0.25) / 3, abs=1e-6)
    loss.backward()
    # ∂loss/∂V_t = (V_t − R_t)/3: the bias of the head moves toward the mean return
    assert float(model.value_head.bias.grad) == pytest.approx(-(1.5 + 1.75 + 0.5) / 3, abs=1e-6)
