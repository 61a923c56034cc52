"""LoRA (trainer.models.lora): adapters train and nothing else, the optimizer holds only them, and the
merged weights are W + (alpha / rank) · B @ A under the plain model's names (decision 0033)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import Qwen2ForCausalLM

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.config.schema import ModelArgs
from trainer.models import lora
from trainer.train import OptimConfig, build_strategy
from trainer.train.base import weight_buckets

# tiny_qwen2: hidden 32, 4 query heads and 2 KV heads of 8 → q_proj 32→32, v_proj 32→16, 2 layers.
# Rank 4 on q_proj and v_proj: q A 4×32 + B 32×4 = 256, v A 4×32 + B 16×4 = 192; × 2 layers.
ADAPTER_PARAMS = 2 * ((4 * 32 + 32 * 4) + (4 * 32 + 16 * 4))  # 896
ARGS = ModelArgs(lora_target="q_proj,v_proj", lora_rank=4, lora_alpha=16)  # scaling 16 / 4 = 4


def trained(args: ModelArgs = ARGS, steps: int = 2) -> tuple[nn.Module, dict[str, torch.Tensor], object]:
    """A LoRA model after `steps` torch_train steps, its state before them, and the strategy."""
    model = lora.add_lora(tiny_qwen2(seed=1), args)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    strategy = build_strategy("torch_train", model, OptimConfig(lr=1e-2, max_grad_norm=None))
    for step in range(steps):
        batch = make_batch(4, 12, torch.Generator().manual_seed(step))
        strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))
    return model, before, strategy


def test_a_step_trains_the_adapters_and_leaves_the_base_weights_as_they_were() -> None:
    model, before, strategy = trained()
    assert lora.trainable_count(model) == ADAPTER_PARAMS
    after = model.state_dict()
    adapters = [k for k in after if ".lora_" in k]
    assert len(adapters) == 8  # A and B of q_proj and v_proj in 2 layers
    assert all(not torch.equal(after[k], before[k]) for k in adapters), "an adapter did not move"
    moved = [k for k in after if ".lora_" not in k and not torch.equal(after[k], before[k])]
    assert moved == [], f"frozen weights changed: {moved}"
    # AdamW holds exp_avg and exp_avg_sq for the adapters only
    state_numel = sum(t.numel() for s in strategy.optimizer.state.values() for t in s.values() if t.dim() > 0)
    assert state_numel == 2 * ADAPTER_PARAMS
    assert sum(p.numel() for g in strategy.optimizer.param_groups for p in g["params"]) == ADAPTER_PARAMS


def test_merged_weights_are_w_plus_scaled_b_at_a() -> None:
    model, _, _ = trained()
    merged = lora.merged_state_dict(model.state_dict(), lora.lora_scaling(ARGS))
    plain = tiny_qwen2(seed=1).state_dict()
    assert set(merged) == set(plain)
    layers = lora.lora_layers(model)
    assert sorted(layers) == sorted(f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "v_proj"))
    for name, layer in layers.items():
        a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
        base = layer.get_base_layer().weight
        by_hand = base + 4.0 * b @ a  # alpha 16 / rank 4
        assert torch.allclose(merged[f"{name}.weight"], by_hand, atol=1e-6), name
        # PEFT's own delta (the reference implementation) agrees
        assert torch.allclose(merged[f"{name}.weight"], base + layer.get_delta_weight("default"), atol=1e-6), name
        assert not torch.equal(merged[f"{name}.weight"], base)  # B moved off zero: the merge is not trivial


def test_the_merged_plain_model_computes_what_the_lora_model_computes() -> None:
    model, _, _ = trained()
    plain = tiny_qwen2(seed=0)
    plain.load_state_dict(lora.merged_state_dict(model.state_dict(), lora.lora_scaling(ARGS)))
    batch = make_batch(3, 10, torch.Generator().manual_seed(9))
    with torch.no_grad():
        expected = model.eval()(**batch).logits
        assert torch.allclose(plain.eval()(**batch).logits, expected, atol=1e-5)


def test_merging_streams_across_small_buckets() -> None:
    model, _, _ = trained()
    whole = lora.merged_state_dict(model.state_dict(), lora.lora_scaling(ARGS))
    buckets = weight_buckets(model.state_dict().items(), device=torch.device("cpu"), dtype=torch.float32,
                             bucket_bytes=512)
    streamed = dict(lora.merge_lora((item for b in buckets for item in b.items()), lora.lora_scaling(ARGS)))
    assert streamed.keys() == whole.keys() and all(torch.equal(streamed[k], whole[k]) for k in whole)
    with pytest.raises(ValueError, match="incomplete LoRA layers"):
        list(lora.merge_lora([("a.q_proj.base_layer.weight", torch.zeros(2, 2))], 1.0))


def test_roll_defaults_and_target_spellings() -> None:
    args = ModelArgs(lora_target="all")
    assert (lora.lora_rank(args), lora.lora_alpha(args)) == (8, 16)  # ROLL: rank 8, alpha 2 × rank
    assert lora.target_modules("all") == "all-linear"
    assert lora.target_modules(" q_proj, v_proj ") == ["q_proj", "v_proj"]
    assert lora.target_modules(r".*\.(q|v)_proj") == r".*\.(q|v)_proj"  # a regex goes to PEFT as is
    model = lora.add_lora(tiny_qwen2(), args)
    adapted = {name.rsplit(".", 1)[1] for name in lora.lora_layers(model)}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # not lm_head
    with pytest.raises(ValueError, match=r"model_args\.lora_target='qkv'"):
        lora.add_lora(tiny_qwen2(), ModelArgs(lora_target="qkv"))
    with pytest.raises(ValueError, match=r"linear layers here; not model\.embed_tokens"):
        lora.add_lora(tiny_qwen2(), ModelArgs(lora_target="embed_tokens"))


def test_additional_target_trains_the_whole_module_and_merges_under_its_own_name() -> None:
    args = ModelArgs(lora_target="q_proj", lora_rank=2, additional_target="lm_head")
    model, before, _ = trained(args, steps=1)
    assert lora.trainable_count(model) == 2 * (2 * 32 + 32 * 2) + 300 * 32  # q adapters + the lm_head copy
    merged = lora.merged_state_dict(model.state_dict(), lora.lora_scaling(args))
    assert set(merged) == set(tiny_qwen2().state_dict())
    assert torch.equal(merged["lm_head.weight"], model.state_dict()["lm_head.modules_to_save.default.weight"])
    assert not torch.equal(merged["lm_head.weight"], before["lm_head.original_module.weight"])


@pytest.mark.parametrize(("autocast", "dtype"), [(True, torch.float32), (False, torch.bfloat16)])
def test_autocast_adapter_dtype_keeps_adapters_in_float32_under_a_16_bit_model(autocast: bool,
                                                                            dtype: torch.dtype) -> None:
    model = lora.add_lora(tiny_qwen2().to(torch.bfloat16),
                          ModelArgs(lora_target="q_proj", autocast_adapter_dtype=autocast))
    dtypes = {p.dtype for n, p in model.named_parameters() if ".lora_" in n}
    assert dtypes == {dtype}
    assert model.model.layers[0].self_attn.q_proj.base_layer.weight.dtype == torch.bfloat16


def test_dropout_reaches_the_adapters() -> None:
    model = lora.add_lora(tiny_qwen2(), ModelArgs(lora_target="q_proj", lora_dropout=0.25))
    layer = model.model.layers[0].self_attn.q_proj
    assert isinstance(layer.lora_dropout["default"], nn.Dropout) and layer.lora_dropout["default"].p == 0.25


def test_a_lora_model_saves_as_a_plain_hf_model(tmp_path) -> None:
    model, _, _ = trained(steps=1)
    merged = lora.merged_state_dict(model.state_dict(), lora.lora_scaling(ARGS))
    model.save_pretrained(tmp_path, state_dict=merged)
    loaded = Qwen2ForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in merged.items())
