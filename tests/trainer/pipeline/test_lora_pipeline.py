"""LoRA in the loop (decision 0033): lora_target makes actor_train and critic train adapters on a frozen
model, the rollout engine receives the merged policy W + (alpha / rank) · B @ A by either sync route, the
HF export is the merged model, and a resumed LoRA run matches the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.pipeline.conftest import REPO_ROOT, load_cfg, metrics_by_step, run_local
from trainer import roles
from trainer.models import lora
from trainer.pipeline.rlvr import push_weights_in_process
from trainer.pipeline.run.models import materialise_tiny_models
from trainer.pipeline.runner import build_groups

LORA = ("actor_train.model_args.lora_target=q_proj,v_proj", "actor_train.model_args.lora_rank=4",
        "actor_train.model_args.lora_alpha=8")
PPO = REPO_ROOT / "examples" / "demo_ppo_cpu.yaml"
CRITIC = ("critic.training_args.per_device_train_batch_size=4", "critic.training_args.gradient_accumulation_steps=2")


def adapter_numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)


def test_lora_target_makes_actor_and_critic_train_adapters_only(tmp_path: Path) -> None:
    cfg = materialise_tiny_models(load_cfg(tmp_path, *LORA, *CRITIC, "critic.model_args.lora_target=all", source=PPO))
    built = build_groups(cfg, ["actor_train", "critic"], "local")
    actor, critic = built["actor_train"].worker.strategy, built["critic"].worker.strategy
    hidden, layers = actor.model.config.hidden_size, actor.model.config.num_hidden_layers
    kv = actor.model.config.num_key_value_heads * (hidden // actor.model.config.num_attention_heads)
    # rank 4 on q_proj (hidden → hidden) and v_proj (hidden → kv): A is 4 × in, B is out × 4
    assert lora.trainable_count(actor.model) == layers * (4 * hidden + hidden * 4 + 4 * hidden + kv * 4)
    stepped = [p for group in actor.optimizer.param_groups for p in group["params"]]
    assert sum(p.numel() for p in stepped) == lora.trainable_count(actor.model) == adapter_numel(actor.model)
    # the critic: adapters on every linear layer of its backbone, plus its new value head
    head = sum(p.numel() for p in critic.model.value_head.parameters())
    assert lora.trainable_count(critic.model) == adapter_numel(critic.model) + head > head


def test_the_engine_receives_the_merged_weights_by_both_routes(tmp_path: Path) -> None:
    cfg = materialise_tiny_models(load_cfg(tmp_path, *LORA))
    built = build_groups(cfg, ["actor_train", "actor_infer"], "local")
    model = built["actor_train"].worker.strategy.model
    engine = built["actor_infer"].worker.engine.model
    torch.manual_seed(5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn_like(param) * 0.1)  # what training does: B off zero
    layers = lora.lora_layers(model)
    expected = {f"{name}.weight": layer.get_base_layer().weight + 2.0 * layer.lora_B["default"].weight
                @ layer.lora_A["default"].weight for name, layer in layers.items()}  # alpha 8 / rank 4
    assert len(expected) == 2 * model.config.num_hidden_layers

    push_weights_in_process(built["actor_train"], built["actor_infer"], bucket_bytes=16 * 1024)
    held = engine.state_dict()
    for name, value in expected.items():
        assert torch.allclose(held[name], value, atol=1e-6), name
    assert torch.equal(held["model.norm.weight"], model.model.norm.weight)

    engine.model.layers[0].self_attn.q_proj.weight.data.zero_()  # the other route, as Ray actors take it
    state = built["actor_train"].call_rank0(roles.Actor.full_state_dict)
    assert set(state) == set(held)
    built["actor_infer"].call_all(roles.Rollout.load_weights, state)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(engine.state_dict()[name], expected[name], atol=1e-6)


def test_a_resumed_lora_run_matches_the_uninterrupted_one(tmp_path: Path) -> None:
    common = ("max_steps=4", "eval_steps=2", "save_steps=2", "seed=7", *LORA)
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    assert run_local(load_cfg(full_dir, *common)) == 0
    assert run_local(load_cfg(cut_dir, *common, "max_steps=2")) == 0
    step_2 = cut_dir / "checkpoints" / "step_2"
    _assert_merged_export(step_2)
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest")) == 0

    full, resumed = metrics_by_step(full_dir), metrics_by_step(cut_dir)
    assert sorted(full) == sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        assert keys == {k for k in resumed[step] if not k.startswith("timing/")}
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    assert full[4]["actor/grad_norm"] > 0 and full[3]["actor/approx_kl"] != full[4]["actor/approx_kl"]


def _assert_merged_export(step_dir: Path) -> None:
    """hf_model is a plain transformers checkpoint: the trained strategy state merged, base weights elsewhere
    untouched; the optimizer state covers the adapters only."""
    exported = _assert_only_adapted_weights_moved(step_dir)
    strategy = step_dir / "actor_train" / "strategy"
    trained = torch.load(strategy / "model.pt", weights_only=True)
    name = "model.layers.0.self_attn.q_proj"
    by_hand = trained[f"{name}.base_layer.weight"] + 2.0 * (
        trained[f"{name}.lora_B.default.weight"] @ trained[f"{name}.lora_A.default.weight"])
    assert torch.allclose(exported[f"{name}.weight"], by_hand, atol=1e-6)
    optimizer = torch.load(strategy / "optimizer.pt", weights_only=True)
    adapters = sum(v.numel() for k, v in trained.items() if ".lora_" in k)
    assert sum(s["exp_avg"].numel() for s in optimizer["state"].values()) == adapters


@pytest.mark.parametrize("strategy", ["fsdp2_train", "deepspeed_train"])
def test_sharded_strategies_train_the_same_adapters(tmp_path: Path, strategy: str) -> None:
    """One rank of fsdp2_train / deepspeed_train takes the same LoRA steps as torch_train."""
    common = ("max_steps=2", "eval_steps=0", "save_steps=2", "seed=3", *LORA)
    assert run_local(load_cfg(tmp_path / "torch", *common)) == 0
    assert run_local(load_cfg(tmp_path / strategy, *common, f"actor_train.strategy_args.strategy_name={strategy}")) == 0
    _assert_only_adapted_weights_moved(tmp_path / strategy / "checkpoints" / "step_2")
    one, other = metrics_by_step(tmp_path / "torch"), metrics_by_step(tmp_path / strategy)
    for step in (1, 2):
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "reward/mean"):
            assert other[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-6), (step, key)


def _assert_only_adapted_weights_moved(step_dir: Path) -> dict[str, torch.Tensor]:
    """The exported policy differs from the initial model in the adapted q_proj / v_proj weights only."""
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(step_dir / "hf_model", local_files_only=True).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(step_dir.parents[1] / "models" / "tiny-seed0",
                                                   local_files_only=True).state_dict()
    assert exported.keys() == initial.keys()
    changed = sorted(k for k in exported if not torch.equal(exported[k], initial[k]))
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), changed
    return exported
