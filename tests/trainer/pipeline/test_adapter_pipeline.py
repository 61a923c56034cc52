"""adapter_name_or_path and freeze_module_prefix in the loop (decision 0042).

A run's checkpoint holds its LoRA adapter as a PEFT folder (lora_adapter/); a new run that names it starts from
the trained policy in every role: actor_train continues training the adapter, the reference and the rollout
engine load it merged, and their first log-probs are the trained model's (its merged HF export), not the base
model's. freeze_module_prefix keeps the named parameters as they were through a training step on each strategy
that trains HF models, while the others move.

How it fails: drop the adapter from load_role_model and the log-probs are the base model's; drop the freezing
and the frozen layers move."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.trainer.pipeline.conftest import load_cfg, run_local
from trainer.models.batch import build_batch, response_logprobs
from trainer.pipeline.run.models import materialise_tiny_models
from trainer.pipeline.runner import build_groups

LORA = ("actor_train.model_args.lora_target=q_proj,v_proj", "actor_train.model_args.lora_rank=4",
        "actor_train.model_args.lora_alpha=8")
ONE_STEP = ("max_steps=1", "save_steps=1", "eval_steps=0", "seed=5")


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in (3, 6, 4)]
    responses = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in (4, 2, 5)]
    return build_batch(prompts, responses, pad_token_id=0)


def logprobs_of(path: Path, rows: dict[str, torch.Tensor]) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    with torch.no_grad():
        return response_logprobs(model, rows, 1.0) * rows["response_mask"]


def test_a_checkpoints_adapter_starts_a_new_run_from_the_trained_policy(tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert run_local(load_cfg(first, *ONE_STEP, *LORA)) == 0
    step = first / "checkpoints" / "step_1"
    adapter, base = step / "lora_adapter", first / "models" / "tiny-seed0"
    assert sorted(p.name for p in adapter.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]

    cfg = materialise_tiny_models(load_cfg(
        tmp_path / "second", *LORA, f"pretrain={base}", f"actor_train.model_args.adapter_name_or_path={adapter}",
        "reference.model_args.model_name_or_path=${pretrain}", f"reference.model_args.adapter_name_or_path={adapter}"))
    built = build_groups(cfg, ["actor_train", "actor_infer", "reference"], "local")
    rows = batch()
    trained, initial = logprobs_of(step / "hf_model", rows), logprobs_of(base, rows)
    assert (trained - initial).abs().max() > 1e-3  # the step moved the policy: the check below means something
    for role in ("actor_train", "reference"):
        got = built[role].worker.compute_log_probs(rows) * rows["response_mask"]
        assert torch.allclose(got, trained, atol=1e-5), role
    engine = built["actor_infer"].worker.engine.model.state_dict()
    exported = AutoModelForCausalLM.from_pretrained(step / "hf_model", local_files_only=True).state_dict()
    assert all(torch.allclose(engine[k], v, atol=1e-6) for k, v in exported.items())
    # actor_train goes on training the adapter it loaded: LoRA layers, base frozen
    model = built["actor_train"].worker.strategy.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)


FROZEN = "model.layers.0.,model.norm"


@pytest.mark.parametrize("strategy", ["torch_train", "fsdp2_train", "deepspeed_train"])
def test_frozen_prefixes_do_not_move_in_a_training_step(tmp_path: Path, strategy: str) -> None:
    cfg = load_cfg(tmp_path, *ONE_STEP, f"actor_train.model_args.freeze_module_prefix={FROZEN}",
                   f"actor_train.strategy_args.strategy_name={strategy}")
    assert run_local(cfg) == 0
    before = AutoModelForCausalLM.from_pretrained(tmp_path / "models" / "tiny-seed0").state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints" / "step_1" / "hf_model").state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    frozen = {k for k in before if k.startswith(("model.layers.0.", "model.norm"))}
    assert len(frozen) == 13  # layer 0's 7 projections, 3 biases and 2 norms; the final norm
    assert moved == set(before) - frozen, sorted(moved ^ (set(before) - frozen))
