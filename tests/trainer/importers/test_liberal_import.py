"""A foreign framework's file is read liberally; what cannot run is one line naming the fix (issue 31).

- a key of no release of the framework is a warning ("not used by PolicyLab"), never an error;
- a `???` left in the file is refused with one line per key the user must set, named by that key (not by a
  key that interpolates it), with the override that sets it;
- an engine this build lacks (SGLang) is one error naming the override that runs the same file on vLLM, in the
  framework's own key and spelling, and with that override the file validates;
- ROLL's layout is native: keys of ROLL's current dataclasses are accepted (import-only), a typo stays an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.trainer.importers.importer_testing import base, set_key
from trainer.config import validate_config
from trainer.config.issues import ValidationResult

ROOT = Path(__file__).resolve().parents[3]


def _yaml(raw: dict) -> str:
    return yaml.safe_dump(raw, sort_keys=False)


def _warned(result: ValidationResult, path: str, *words: str) -> bool:
    return any(w.path == path and all(word in w.message for word in words) for w in result.warnings)


# --- unknown keys of a foreign file --------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "path", "value"), [
    ("verl", "reward_model.param_offload", True),                      # verl v0.3/v0.4 Megatron reward model
    ("verl", "actor_rollout_ref.actor.megatron.expert_parallel_size", 4),
    ("verl", "next_release_section.knob", 1),                          # a whole section no release has
    ("skyrl", "trainer.algorithm.brand_new_loss_knob", 0.5),
    ("rlinf", "actor.model.moe_router_enable_expert_bias", True),
])
def test_a_key_of_no_release_is_a_warning_naming_it(fmt: str, path: str, value: object) -> None:
    raw = set_key(base(fmt), path, value)
    if fmt == "rlinf":
        raw["rollout"]["rollout_backend"] = "vllm"
    result = validate_config(raw)
    assert result.ok, [str(i) for i in result.errors]
    assert _warned(result, path, "not used by PolicyLab", repr(value))


@pytest.mark.parametrize(("path", "value", "reason"), [
    ("trainer.algorithm.off_policy_correction.outlier_token_is_threshold_low", 1e-4, "veto of whole sequences"),
    ("trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high", 3.0, "only when tis_ratio_type is token"),
    ("trainer.exclude_modules", "lm_head", "LoRA adapters"),
    ("generator.model_name", "/models/served", "the engine serves actor_infer's model"),
])
def test_skyrl_04_keys_are_known_with_the_reason(path: str, value: object, reason: str) -> None:
    """SkyRL 0.4's keys are in its surface: set to a non-default value, a warning says what happens instead."""
    result = validate_config(set_key(base("skyrl"), path, value))
    assert result.ok, [str(i) for i in result.errors]
    assert _warned(result, path, reason)
    assert not [w for w in result.warnings if "not used by PolicyLab" in w.message]


# --- ??? placeholders and resolvers ---------------------------------------------------------------------------


VERL_MAIN_WITH_READERS = """\
defaults: [ppo_trainer, _self_]
actor_rollout_ref:
  model:
    path: /models/policy
  actor: {ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 2}
  rollout:
    name: ???
    n: 2
    tensor_model_parallel_size: 1
data: {train_files: /data/train.parquet, train_batch_size: 8}
trainer: {nnodes: 1, n_gpus_per_node: 2, total_training_steps: 3}
algorithm: {adv_estimator: grpo}
distillation:
  teacher_models:
    teacher_model:
      inference:
        name: ${oc.select:actor_rollout_ref.rollout.name,vllm}
        engine: ${actor_rollout_ref.rollout.name}
"""


def test_a_placeholder_is_named_by_the_users_key_not_by_a_key_that_reads_it() -> None:
    """verl main leaves rollout.name as ??? and other keys read it (oc.select, plain interpolation): one line, at
    the key the user must set, with the override."""
    result = validate_config(VERL_MAIN_WITH_READERS)
    assert [i.path for i in result.errors] == ["actor_rollout_ref.rollout.name"]
    assert result.errors[0].message.endswith("override actor_rollout_ref.rollout.name=vllm")
    fixed = validate_config(VERL_MAIN_WITH_READERS, ["actor_rollout_ref.rollout.name=vllm"])
    assert fixed.ok, [str(i) for i in fixed.errors]


def test_every_placeholder_left_gets_its_own_line() -> None:
    text = VERL_MAIN_WITH_READERS.replace("path: /models/policy", "path: ???")
    result = validate_config(text)
    assert sorted(i.path for i in result.errors) == ["actor_rollout_ref.model.path", "actor_rollout_ref.rollout.name"]
    assert all(i.message.startswith("required:") and "override" in i.message for i in result.errors)


def test_a_placeholder_in_a_native_file_is_refused_too() -> None:
    text = (ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    result = validate_config(text, ["actor_infer.generating_args.temperature=???"])
    assert [i.path for i in result.errors] == ["actor_infer.generating_args.temperature"]
    assert "actor_infer.generating_args.temperature=<value>" in result.errors[0].message


@pytest.mark.parametrize("select", [
    "${oc.select:actor_rollout_ref.rollout.n,7}",            # the key exists: its value (4)
    "${oc.select:actor_rollout_ref.rollout.missing_key,4}",  # it does not: the default
])
def test_oc_select_resolves_as_hydra_does(select: str) -> None:
    from trainer.config.loading import load_raw

    raw = load_raw(set_key(base("verl"), "critic.rollout_n", select))
    assert raw["critic"]["rollout_n"] == 4


# --- engines this build lacks ---------------------------------------------------------------------------------


CASES = {
    "verl": ("actor_rollout_ref.rollout.name", "sglang", "actor_rollout_ref.rollout.name=vllm"),
    "rlinf": ("rollout.rollout_backend", "sglang", "rollout.rollout_backend=vllm"),
    "skyrl": ("generator.backend", "sglang", "generator.backend=vllm"),
}


@pytest.mark.parametrize("fmt", CASES)
def test_sglang_is_one_error_naming_the_override_and_the_override_validates(fmt: str) -> None:
    key, value, override = CASES[fmt]
    raw = set_key(base(fmt), key, value)
    result = validate_config(_yaml(raw))
    assert [(i.path, i.kind) for i in result.errors] == [(key, "not_built")], [str(i) for i in result.errors]
    assert result.errors[0].message.startswith("sglang is not built in this version of PolicyLab; available for")
    assert result.errors[0].message.endswith(f"with the override {override}")
    fixed = validate_config(_yaml(raw), [override])
    assert fixed.ok, [str(i) for i in fixed.errors]
    assert fixed.config.actor_infer.strategy_args.strategy_name == "vllm"



def test_verl_agents_multi_turn_env_is_one_error_naming_the_override() -> None:
    """verl-agent's `env.max_turn` (turns against a remote environment) cannot run here: one error at that key,
    ending with the override that trains the file single-turn; with it the file validates."""
    raw = set_key(base("verl"), "env", {"environment_endpoint": "http://localhost:8000", "max_turn": 20})
    result = validate_config(_yaml(raw))
    assert [i.path for i in result.errors] == ["env.max_turn"], [str(i) for i in result.errors]
    assert "multi-turn" in result.errors[0].message and result.errors[0].message.endswith("with the override ~env")
    assert validate_config(_yaml(raw), ["~env"]).ok

def test_sglang_in_a_native_roll_file_names_rolls_override_and_reads_sglang_names() -> None:
    text = (ROOT / "examples" / "demo_grpo_vllm_cpu.yaml").read_text()
    sglang = ["actor_infer.strategy_args.strategy_name=sglang",
              "actor_infer.strategy_args.strategy_config={mem_fraction_static: 0.7}"]
    result = validate_config(text, sglang)
    assert [(i.path, i.kind) for i in result.errors] == [("actor_infer.strategy_args.strategy_name", "not_built")]
    assert result.errors[0].message.endswith("override actor_infer.strategy_args.strategy_name=vllm")
    fixed = validate_config(text, [*sglang, "actor_infer.strategy_args.strategy_name=vllm"])
    assert fixed.ok, [str(i) for i in fixed.errors]
    assert fixed.config.actor_infer.strategy_args.strategy_config.gpu_memory_utilization == 0.7
    assert _warned(fixed, "actor_infer.strategy_args.strategy_config.mem_fraction_static", "gpu_memory_utilization")


# --- ROLL's current key set is native -------------------------------------------------------------------------


ROLL_KEYS = [
    ("demo_grpo_cpu.yaml", "+actor_train.data_args.interleave_probs='1.0'", "actor_train.data_args.interleave_probs"),
    ("demo_grpo_cpu.yaml", "+actor_train.data_args.enable_thinking=false", "actor_train.data_args.enable_thinking"),
    ("demo_grpo_cpu.yaml", "+actor_train.offload_nccl=true", "actor_train.offload_nccl"),
    ("agentic_grid_cpu.yaml", "+custom_envs.FrozenLake.agent_runner_cls=roll.pipeline.agentic.agent_runner.GEMRunner",
     "custom_envs.FrozenLake.agent_runner_cls"),
    ("agentic_grid_cpu.yaml", "+train_env_manager.generating_args.temperature=0.7",
     "train_env_manager.generating_args"),
]


@pytest.mark.parametrize(("example", "override", "path"), ROLL_KEYS, ids=[p for _, _, p in ROLL_KEYS])
def test_keys_of_rolls_dataclasses_are_accepted_as_import_only(example: str, override: str, path: str) -> None:
    result = validate_config((ROOT / "examples" / example).read_text(), [override])
    assert result.ok, [str(i) for i in result.errors]
    assert _warned(result, path, "accepted for compatibility but has no effect here")


def test_fsdp2_batched_model_update_is_accepted() -> None:
    text = (ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    result = validate_config(text, ["actor_train.strategy_args.strategy_name=fsdp2_train",
                                    "+actor_train.strategy_args.strategy_config.use_batched_model_update=true"])
    assert result.ok, [str(i) for i in result.errors]
    assert _warned(result, "actor_train.strategy_args.strategy_config.use_batched_model_update", "no effect")


def test_a_typo_in_a_native_file_is_still_an_error_with_did_you_mean() -> None:
    text = (ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    result = validate_config(text, ["+actor_train.data_args.interleave_prob='1.0'"])
    issue = next(i for i in result.errors if i.path == "actor_train.data_args.interleave_prob")
    assert "did you mean interleave_probs?" in issue.message


def test_a_top_level_helper_built_from_interpolation_is_a_warning_a_literal_typo_an_error() -> None:
    """ROLL's examples define helpers such as `model_name: ${exp_name}-${now:%Y%m%d}` that nothing reads; ROLL
    ignores them and so do we (a warning). A top-level key with a plain value is a typo: an error."""
    text = (ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    helper = validate_config(text + "model_name: ${exp_name}-${now:%Y%m%d_%H%M%S}\n")
    assert helper.ok and _warned(helper, "model_name", "not used by PolicyLab", "helper variable")
    typo = validate_config(text + "max_step: 10\n")
    assert any(i.path == "max_step" and "did you mean max_steps?" in i.message for i in typo.errors)


def test_remax_is_refused_until_its_greedy_baseline_is_generated() -> None:
    """ReMax needs a greedy rollout per prompt as its baseline; the RLVR pipeline generates none, so a config naming
    it is refused before launch (it failed at the first advantage computation)."""
    result = validate_config(ROOT / "examples" / "demo_grpo_cpu.yaml", ["adv_estimator=remax"])
    assert [(i.path, i.kind) for i in result.errors] == [("adv_estimator", "not_built")], [str(i) for i in result.errors]
