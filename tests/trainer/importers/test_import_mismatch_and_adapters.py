"""verl's and SkyRL's spellings of features that act natively (issue 36): the rollout-training mismatch correction
(train_infer_correction, decision 0040), trained LoRA adapters and LoRA served by vLLM (decision 0042).

The values check goes through the whole path: a foreign file is imported and validated, and the pipeline's own
correction (trainer.pipeline.learner.correct_train_infer) is applied to log-probs whose ratios were chosen by hand; the weights
and the kept tokens are compared with the framework's formula worked out on those numbers. The refusals check that
what is not built is named with the override that runs the file without it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from importer_testing import base, set_key

from trainer.config import validate_config
from trainer.config.importers import translate
from trainer.config.preflight import check_adapters
from trainer.pipeline.learner import LearnerSpec, correct_train_infer

RC = "algorithm.rollout_correction"
OPC = "trainer.algorithm.off_policy_correction"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs"

# log rho = old - rollout per token: sample 0 has rho = (4, 1, 0.5), sample 1 rho = (e^0.01, e^0.01) and a pad
LOG_RHO = torch.tensor([[math.log(4.0), 0.0, math.log(0.5)], [0.01, 0.01, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def imported(fmt: str, keys: dict[str, Any]) -> Any:
    raw = base(fmt)
    for path, value in keys.items():
        set_key(raw, path, value)
    result = validate_config(raw)
    assert result.ok, [str(i) for i in result.errors]
    return result


def corrected(config: Any) -> tuple[list[list[int]], list[list[float]] | None]:
    """The pipeline's correction of LOG_RHO on a fresh batch: (kept tokens, weights or None)."""
    old, engine = LOG_RHO - 2.0, torch.full_like(LOG_RHO, -2.0)  # pi_old / mu = e^LOG_RHO
    batch = {"response_mask": MASK.clone(), "advantages": torch.ones(2, 3)}
    out, _ = correct_train_infer(LearnerSpec.from_config(config), batch, MASK, old, engine, rows=torch.tensor([True, True]))
    weights = out.get("train_infer_weights")
    return out["response_mask"].tolist(), None if weights is None else weights.tolist()


def test_verl_token_weight_and_geometric_rejection_give_verls_numbers() -> None:
    """verl: w = min(rho_t, 3); geometric RS keeps a sample when exp(mean log rho) is in [1/1.25, 1.25]. Sample 0:
    exp((ln 4 + 0 + ln 0.5) / 3) = 2^(1/3) = 1.26 > 1.25, rejected; sample 1: e^0.01 = 1.01, kept."""
    result = imported("verl", {LOG_PROBS: True, f"{RC}.rollout_is": "token", f"{RC}.rollout_is_threshold": 3.0,
                               f"{RC}.rollout_rs": "geometric", f"{RC}.rollout_rs_threshold": 1.25})
    kept, weights = corrected(result.config)
    assert kept == [[0, 0, 0], [1, 1, 0]]
    assert weights[0] == pytest.approx([3.0, 1.0, 0.5]) and weights[1][:2] == pytest.approx([math.exp(0.01)] * 2)


def test_verl_v06_mask_mode_rejects_tokens_outside_the_band_and_weights_the_rest() -> None:
    """v0.6 mask mode at token level, threshold 2 (lower 1/2): rho = 4 is rejected, 0.5 and 1 kept (inclusive); the
    weight is rho itself inside the band."""
    result = imported("verl", {LOG_PROBS: True, "algorithm.rollout_is_threshold": 2.0, "algorithm.rollout_is": True,
                               "algorithm.rollout_is_mode": "mask"})
    kept, weights = corrected(result.config)
    assert kept == [[0, 1, 1], [1, 1, 0]]
    assert weights[0][1:] == pytest.approx([1.0, 0.5])


def test_skyrl_sequence_weight_and_product_mask_give_skyrls_numbers() -> None:
    """SkyRL: sequence TIS min(prod rho, 1.5); product mask keeps prod rho in [0.4, 1.9]: sample 0 has
    prod = 4 · 1 · 0.5 = 2 > 1.9, masked; sample 1 has e^0.02, kept with weight e^0.02."""
    result = imported("skyrl", {"trainer.algorithm.use_kl_loss": False, f"{OPC}.tis_ratio_type": "sequence",
                                f"{OPC}.sequence_tis_ratio_clip_high": 1.5, f"{OPC}.sequence_mask_metric": "product",
                                f"{OPC}.product_mask_low": 0.4, f"{OPC}.product_mask_high": 1.9})
    assert not [w for w in result.warnings if w.path.startswith(OPC)]
    kept, weights = corrected(result.config)
    assert kept == [[0, 0, 0], [1, 1, 0]]
    assert weights[0] == pytest.approx([1.5] * 3) and weights[1][:2] == pytest.approx([math.exp(0.02)] * 2)


def test_skyrl_use_tis_is_the_token_weight() -> None:
    result = imported("skyrl", {"trainer.algorithm.use_tis": True, "trainer.algorithm.tis_imp_ratio_cap": 2.0})
    kept, weights = corrected(result.config)
    assert kept == MASK.tolist()
    assert weights[0] == pytest.approx([2.0, 1.0, 0.5])


@pytest.mark.parametrize(("fmt", "keys", "path", "override"), [
    ("verl", {f"{RC}.bypass_mode": True, f"{RC}.rollout_rs": "token"}, f"{RC}.bypass_mode", f"{RC}.bypass_mode=false"),
    ("verl", {f"{RC}.loss_type": "reinforce"}, f"{RC}.loss_type", f"{RC}.loss_type=ppo_clip"),
    ("verl", {f"{RC}.use_policy_gradient": True}, f"{RC}.use_policy_gradient", f"{RC}.use_policy_gradient=false"),
    ("verl", {LOG_PROBS: True, f"{RC}.rollout_rs": "seq_mean_k1"}, f"{RC}.rollout_rs", f"~{RC}.rollout_rs"),
    ("verl", {LOG_PROBS: True, f"{RC}.rollout_is": "token", f"{RC}.rollout_is_threshold": "0.5_2.0"},
     f"{RC}.rollout_is_threshold", f"~{RC}.rollout_is_threshold"),
    ("verl", {"actor_rollout_ref.model.lora_adapter_path": "/adapters/a"}, "actor_rollout_ref.model.lora_adapter_path",
     "actor_rollout_ref.model.lora_rank=16"),
    ("skyrl", {"trainer.algorithm.use_tis": True}, "trainer.algorithm.use_tis", "trainer.algorithm.tis_imp_ratio_cap=2.0"),
    ("skyrl", {f"{OPC}.sequence_mask_metric": "max"}, f"{OPC}.sequence_mask_metric", f"~{OPC}.sequence_mask_metric"),
])
def test_what_is_not_built_is_refused_with_the_override(fmt: str, keys: dict[str, Any], path: str,
                                                         override: str) -> None:
    raw = base(fmt)
    for key, value in keys.items():
        set_key(raw, key, value)
    _, issues = translate(raw, fmt)
    errors = [i for i in issues if i.severity == "error"]
    assert [i.path for i in errors] == [path], [str(i) for i in issues]
    assert errors[0].message.endswith(override), errors[0].message


@pytest.mark.parametrize(("fmt", "keys", "path", "reason"), [
    ("verl", {LOG_PROBS: True, f"{RC}.rollout_is": "token", f"{RC}.rollout_token_veto_threshold": 1e-4},
     f"{RC}.rollout_token_veto_threshold", "a veto rejects a whole sequence"),
    ("verl", {LOG_PROBS: True, f"{RC}.rollout_is": "token", f"{RC}.rollout_is_batch_normalize": True},
     f"{RC}.rollout_is_batch_normalize", "not rescaled to mean 1"),
    ("verl", {LOG_PROBS: True, f"{RC}.rollout_rs": "token", "algorithm.adv_estimator": "gae",
              "critic.model.path": "/models/critic", "critic.ppo_micro_batch_size_per_gpu": 2},
     f"{RC}.rollout_rs", "critic's value loss"),
    ("verl", {f"{RC}.rollout_rs_threshold": 1.5}, f"{RC}.rollout_rs_threshold", "used only with rollout_rs"),
    ("verl", {"algorithm.rollout_is": True}, "algorithm.rollout_is", "rollout_is_threshold is null"),
    ("verl", {LOG_PROBS: True, "algorithm.rollout_is_threshold": 2.0}, "algorithm.rollout_is_threshold",
     "metrics only"),
    ("verl", {LOG_PROBS: True, "actor_rollout_ref.actor.tis_imp_ratio_cap": 2.0,
              "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo"},
     "actor_rollout_ref.actor.tis_imp_ratio_cap", "vanilla (PPO) loss only"),
    ("verl", {LOG_PROBS: True}, LOG_PROBS, "always computed here"),
    ("skyrl", {f"{OPC}.tis_ratio_type": "token", f"{OPC}.outlier_token_is_threshold_high": 100.0},
     f"{OPC}.outlier_token_is_threshold_high", "veto of whole sequences"),
    ("skyrl", {f"{OPC}.token_mask_is_threshold_low": 0.5}, f"{OPC}.token_mask_is_threshold_low", "both"),
    ("skyrl", {f"{OPC}.sequence_mask_metric": "geometric", "trainer.algorithm.use_entropy_loss": True},
     f"{OPC}.sequence_mask_metric", "KL and entropy terms"),
])
def test_what_differs_is_imported_or_left_with_a_warning(fmt: str, keys: dict[str, Any], path: str,
                                                          reason: str) -> None:
    result = imported(fmt, keys)
    assert any(w.path == path and reason in w.message for w in result.warnings), [str(w) for w in result.warnings]


def test_verl_without_calculate_log_probs_imports_no_correction() -> None:
    result = imported("verl", {f"{RC}.rollout_is": "token", f"{RC}.rollout_rs": "token"})
    assert not result.config.train_infer_correction.acts()
    assert any(w.path == f"{RC}.rollout_is" and LOG_PROBS in w.message for w in result.warnings)


def _adapter(folder: Path, r: int, alpha: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": r, "lora_alpha": alpha,
                                                             "target_modules": ["q_proj", "v_proj"]}))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    return folder


def test_verl_lora_adapter_path_is_continued_and_checked_against_the_lora_keys(tmp_path: Path) -> None:
    """verl reads rank and alpha from the adapter; here they must be the file's lora_rank / lora_alpha, which
    preflight checks before launch, naming the value to set."""
    adapter = _adapter(tmp_path / "sft", r=8, alpha=16)
    keys = {"actor_rollout_ref.model.lora_rank": 8, "actor_rollout_ref.model.lora_alpha": 16,
            "actor_rollout_ref.model.target_modules": ["q_proj", "v_proj"],
            "actor_rollout_ref.model.lora_adapter_path": str(adapter)}
    config = imported("verl", keys).config
    assert config.actor_train.model_args.adapter_name_or_path == str(adapter)
    assert config.actor_infer.strategy_args.strategy_config.enable_lora
    assert check_adapters(config) == []
    config = imported("verl", {**keys, "actor_rollout_ref.model.lora_alpha": 32}).config
    assert [i.message for i in check_adapters(config)] == [
        "cannot continue training it: the adapter has lora_alpha=16 but actor_train.model_args.lora_alpha gives 32; "
        "set lora_alpha: 16"]


@pytest.mark.parametrize(("fmt", "rank", "strategy"), [
    ("verl", "actor_rollout_ref.model.lora_rank", ("actor_rollout_ref.actor.strategy", "megatron")),
    ("skyrl", "trainer.policy.model.lora.rank", ("trainer.strategy", "megatron")),
])
def test_lora_is_served_by_vllm_outside_megatron_only(fmt: str, rank: str, strategy: tuple[str, str]) -> None:
    raw = set_key(base(fmt), rank, 16)
    native, issues = translate(raw, fmt)
    assert native["actor_infer"]["strategy_args"]["strategy_config"]["enable_lora"] is True
    native, issues = translate(set_key(raw, *strategy), fmt)
    assert not [i for i in issues if i.severity == "error"], issues
    assert "enable_lora" not in native["actor_infer"]["strategy_args"].get("strategy_config", {})
