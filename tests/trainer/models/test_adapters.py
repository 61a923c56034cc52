"""Trained LoRA adapters (trainer.models.adapters, decision 0042): a PEFT folder merges into a role's base model as
W + scaling · B @ A, a LoRA-training role continues training it (refused, naming both sides, when it is not the LoRA
the config trains), and a run's own adapter is written as a folder PEFT itself loads.

Expected values come from the adapter's file (B @ A by hand) and from PEFT's PeftModel (the reference
implementation), never from the code under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.config.adapters import adapter_scaling
from trainer.config.schema import ModelArgs
from trainer.models import adapters, lora
from trainer.train import OptimConfig, build_strategy

FIELD = "actor_train.model_args.adapter_name_or_path"
ARGS = ModelArgs(lora_target="q_proj,v_proj", lora_rank=4, lora_alpha=16)  # scaling 16 / 4 = 4


def peft_adapter(folder: Path, seed: int = 1, **config: object) -> PeftModel:
    """A PEFT LoRA (rank 4, alpha 16 on q_proj and v_proj unless `config` says otherwise) with B moved off zero,
    as training leaves it, saved with PEFT's own save_pretrained."""
    options = {"r": 4, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], **config}
    model = get_peft_model(tiny_qwen2(), LoraConfig(**options))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn_like(param) * 0.2)
    model.save_pretrained(folder)
    return model.eval()


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(**make_batch(3, 10, torch.Generator().manual_seed(9))).logits


def test_an_inference_role_gets_the_adapter_merged_as_w_plus_scaled_b_at_a(tmp_path: Path) -> None:
    reference = peft_adapter(tmp_path)
    merged = adapters.merge_adapter(tiny_qwen2(), tmp_path, FIELD)
    assert not any(".lora_" in name for name, _ in merged.named_parameters())  # a plain HF model again
    base, file = tiny_qwen2().state_dict(), load_file(tmp_path / "adapter_model.safetensors")
    state = merged.state_dict()
    adapted = 0
    for name, weight in base.items():
        module = name.removesuffix(".weight")
        a = file.get(f"base_model.model.{module}.lora_A.weight")
        if a is None:
            assert torch.equal(state[name], weight), name  # not adapted: untouched
            continue
        by_hand = weight + 4.0 * file[f"base_model.model.{module}.lora_B.weight"] @ a  # alpha 16 / rank 4
        assert torch.allclose(state[name], by_hand, atol=1e-6), name
        adapted += 1
    assert adapted == 4  # q_proj and v_proj in 2 layers
    assert torch.allclose(logits(merged), logits(reference), atol=1e-5)  # PEFT's own forward


def test_rank_stabilised_adapters_merge_with_alpha_over_sqrt_r(tmp_path: Path) -> None:
    assert adapter_scaling({"r": 4, "lora_alpha": 16}) == 4.0
    assert adapter_scaling({"r": 4, "lora_alpha": 16, "use_rslora": True}) == 8.0  # 16 / sqrt(4)
    peft_adapter(tmp_path, use_rslora=True)
    merged = adapters.merge_adapter(tiny_qwen2(), tmp_path, FIELD).state_dict()
    file = load_file(tmp_path / "adapter_model.safetensors")
    name = "model.layers.1.self_attn.v_proj"
    by_hand = tiny_qwen2().state_dict()[f"{name}.weight"] + 8.0 * (
        file[f"base_model.model.{name}.lora_B.weight"] @ file[f"base_model.model.{name}.lora_A.weight"])
    assert torch.allclose(merged[f"{name}.weight"], by_hand, atol=1e-6)


def test_a_lora_role_continues_training_the_adapter(tmp_path: Path) -> None:
    reference = peft_adapter(tmp_path)
    model = adapters.load_adapter(lora.add_lora(tiny_qwen2(), ARGS), tmp_path, ARGS, FIELD)
    file = load_file(tmp_path / "adapter_model.safetensors")
    state = model.state_dict()
    for key, tensor in file.items():
        name = key.removeprefix("base_model.model.").replace(".lora_A.", ".lora_A.default.").replace(
            ".lora_B.", ".lora_B.default.")
        assert torch.equal(state[name], tensor), name
    assert torch.allclose(logits(model), logits(reference), atol=1e-6)
    # and it trains on from there: adapters move, the base stays
    before = {k: v.clone() for k, v in model.state_dict().items()}
    strategy = build_strategy("torch_train", model.train(), OptimConfig(lr=1e-2, max_grad_norm=None))
    batch = make_batch(4, 12, torch.Generator().manual_seed(0))
    strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))
    moved = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert moved == {k for k in before if ".lora_" in k}


@pytest.mark.parametrize(("args", "config", "words"), [
    (ModelArgs(lora_target="q_proj,v_proj"), {}, "rank r=4 but actor_train.model_args.lora_rank gives 8 "
                                                 "(unset: ROLL default 8); set lora_rank: 4"),
    (ModelArgs(lora_target="q_proj,v_proj", lora_rank=4, lora_alpha=8), {}, "lora_alpha=16 but "
                                                                            "actor_train.model_args.lora_alpha gives 8"),
    (ModelArgs(lora_target="all", lora_rank=4, lora_alpha=16), {}, "lora_target='all' adapts 14 modules, the "
                                                                   "adapter 4"),
    (ModelArgs(lora_target="q_proj", lora_rank=4, lora_alpha=16), {}, "not adapted here: "
                                                                      "model.layers.0.self_attn.v_proj"),
    (ARGS, {"modules_to_save": ["lm_head"]}, "saves modules ['lm_head'] beside its LoRA layers but "
                                             "actor_train.model_args.additional_target is None"),
    (ARGS, {"use_rslora": True}, "uses use_rslora"),
])
def test_an_adapter_that_is_not_the_configured_lora_is_refused(tmp_path: Path, args: ModelArgs, config: dict,
                                                                words: str) -> None:
    peft_adapter(tmp_path, **config)
    with pytest.raises(ValueError, match="cannot continue training") as error:
        adapters.load_adapter(lora.add_lora(tiny_qwen2(), args), tmp_path, args, FIELD)
    assert words in str(error.value)
    assert str(error.value).startswith(f"{FIELD}='{tmp_path}'")


def test_a_runs_own_adapter_is_a_folder_peft_loads_and_this_field_loads_back(tmp_path: Path) -> None:
    args = ModelArgs(lora_target="all", lora_rank=2, lora_alpha=6, additional_target="lm_head")
    model = lora.add_lora(tiny_qwen2(), args)
    strategy = build_strategy("torch_train", model, OptimConfig(lr=1e-2, max_grad_norm=None))
    for step in range(2):
        batch = make_batch(4, 12, torch.Generator().manual_seed(step))
        strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))
    adapters.save_adapter(tmp_path, model.state_dict(), args, "/models/base")
    config = json.loads((tmp_path / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["modules_to_save"]) == (2, 6, ["lm_head"])
    assert config["base_model_name_or_path"] == "/models/base" and len(config["target_modules"]) == 14
    # PEFT (the reference) computes what the run's model computes
    reference = PeftModel.from_pretrained(tiny_qwen2(), tmp_path)
    assert torch.allclose(logits(reference), logits(model), atol=1e-5)
    # and the field loads it into a fresh LoRA model, tensor for tensor
    again = adapters.load_adapter(lora.add_lora(tiny_qwen2(), args), tmp_path, args, FIELD).state_dict()
    trained = model.state_dict()
    assert all(torch.equal(again[k], v) for k, v in trained.items() if ".lora_" in k or ".modules_to_save." in k)


@pytest.mark.parametrize(("make", "words"), [
    (lambda folder: folder / "missing", "is not a folder"),
    (lambda folder: folder, "holds no adapter_config.json"),
    (lambda folder: _write(folder, {"peft_type": "PREFIX_TUNING"}), "is a PREFIX_TUNING adapter; only LoRA"),
    (lambda folder: _write(folder, {"peft_type": "LORA", "r": 4}), "holds no adapter weights"),
])
def test_a_folder_that_is_no_lora_adapter_is_refused_naming_the_field(tmp_path: Path, make, words: str) -> None:
    with pytest.raises(ValueError, match=words) as error:
        adapters.merge_adapter(tiny_qwen2(), make(tmp_path), FIELD)
    assert str(error.value).startswith(FIELD)


def _write(folder: Path, config: dict) -> Path:
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_a_reward_model_scores_with_its_adapter_merged(tmp_path: Path) -> None:
    """rewards.<name>.model_args.adapter_name_or_path reaches a reward_model reward: its scores are PEFT's model's."""
    from transformers import AutoModelForSequenceClassification, Qwen2Config, Qwen2ForSequenceClassification

    from tests.trainer.config.config_testing import changed
    from trainer.config import validate_config
    from trainer.models.tiny import build_tokenizer
    from trainer.roles.reward import build_reward_fn

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=tokenizer.pad_token_id)
    Qwen2ForSequenceClassification(config).save_pretrained(tmp_path / "rm")
    tokenizer.save_pretrained(tmp_path / "rm")
    peft_model = get_peft_model(AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm"),
                                LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="SEQ_CLS"))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    peft_model.save_pretrained(tmp_path / "adapter")

    section = {"reward_type": "reward_model", "model_args": {"model_name_or_path": str(tmp_path / "rm"),
                                                             "adapter_name_or_path": str(tmp_path / "adapter")}}
    cfg = validate_config(changed({"rewards": {"rm": section}})).config
    prompts, responses = ["Q: 2+2?\n", "hello "], ["4", "world"]
    scores = build_reward_fn(cfg)(prompts, responses, [{}, {}])
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm").eval()
    with torch.no_grad():
        expected = [peft_model.eval()(**tokenizer(p + r, return_tensors="pt")).logits[0, 0].item()
                    for p, r in zip(prompts, responses, strict=True)]
        base = [plain(**tokenizer(p + r, return_tensors="pt")).logits[0, 0].item()
                for p, r in zip(prompts, responses, strict=True)]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(expected, base, strict=True)) > 1e-3  # the adapter matters here
