"""ROLL's rollout-only agentic run (decision 0062 (b)): an agentic file with no actor_train section runs
AgenticRolloutPipeline (examples/start_agentic_rollout_pipeline.py), which plays rollout_batch_size trajectories
per step with actor_infer, logs val/ score metrics, dumps the trajectories and never trains.

How it fails: the old code refused roll/qwen2.5-0.5B-agentic/agentic_rollout_sokoban.yaml (adv_estimator gae
without a critic), and ran a file without actor_train as a training run (a learner, weight updates, checkpoints).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.trainer.pipeline.conftest import events, metrics_by_step, run_local

ROOT = Path(__file__).resolve().parents[3]
ROLL_FILE = ROOT / "tests/fixtures/foreign_corpus/roll/qwen2.5-0.5B-agentic/agentic_rollout_sokoban.yaml"

# an agentic file in ROLL's rollout-only shape: no actor_train section, gae and no critic
ROLLOUT_ONLY = """
seed: 7
pretrain: tiny://tiny?seed=0
max_steps: 2
save_steps: 1
logging_steps: 1
rollout_batch_size: 4
prompt_length: 64
response_length: 64
track_with: none
adv_estimator: gae
ppo_epochs: 2
train_env_manager:
  env_groups: 2
  group_size: 2
  tags: [FrozenLake]
  n_groups: [2]
custom_envs:
  FrozenLake:
    env_type: frozen_lake
    max_steps: 3
    max_tokens_per_step: 1
    env_instruction: ""
    env_config: {size: 3, p: 0.8, is_slippery: false, action_format: plain}
actor_infer:
  generating_args: {max_new_tokens: 1, temperature: 1.0}
  strategy_args: {strategy_name: hf_infer}
  device_mapping: "[0]"
"""


def validate(text: str, *overrides: str):  # type: ignore[no-untyped-def]
    from trainer.config import load_raw, validate_config

    return validate_config(load_raw(text, list(overrides)))


def test_roll_rollout_file_validates_as_a_rollout_only_run() -> None:
    from trainer.config import load_raw, validate_config

    result = validate_config(load_raw(ROLL_FILE, []))
    assert [str(i) for i in result.errors] == []
    from trainer.config.schema import PipelineConfig

    assert PipelineConfig.model_validate(load_raw(ROLL_FILE, [])).pipeline_mode == "rollout_only"


def test_training_knobs_warn_and_an_actor_train_section_keeps_training() -> None:
    result = validate(ROLLOUT_ONLY)
    assert [str(i) for i in result.errors] == []
    warned = {i.path for i in result.warnings if "has no effect in a rollout-only run" in str(i)}
    assert warned == {"adv_estimator", "ppo_epochs"}
    # the mode is said, so a native file that left actor_train out does not silently stop training
    assert any(i.path == "pipeline_mode" and "nothing trains" in str(i) for i in result.warnings)
    # the same file with a trainer is a training run: gae without a critic is refused again
    trained = validate(ROLLOUT_ONLY, "+actor_train.infer_batch_size=4")
    assert any(str(i).startswith("critic: adv_estimator gae needs a critic") for i in trained.errors)


def test_a_rollout_only_run_plays_logs_and_records_without_training(tmp_path: Path) -> None:
    from trainer.config import load_config

    cfg = load_config(ROLLOUT_ONLY, [f"output_dir={tmp_path}"])
    assert cfg.pipeline_mode == "rollout_only"
    model_dir = tmp_path / "models"
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    for step, m in metrics.items():
        assert {
            "val/score/mean",
            "val/score/max",
            "val/score/min",
            "val/FrozenLake/score/mean",
            "val/env/success",
        } <= set(m)
        assert m["val/score/min"] <= m["val/score/mean"] <= m["val/score/max"]
        assert m["system/samples"] == 4.0 * step
        assert not [k for k in m if k.startswith(("actor/", "critic/", "reward/", "advantages/"))]
    rollouts = events(tmp_path, "rollouts")
    assert [len(e["data"]["samples"]) for e in rollouts] == [4, 4]
    assert all(
        {"response", "reward", "env_tag", "num_turns"} <= set(s)
        for e in rollouts
        for s in e["data"]["samples"]
    )
    assert not list(tmp_path.rglob("checkpoint*")), "no weight checkpoint"
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_dir.rglob("*.safetensors")}
    assert before  # the tiny policy the engine loaded, never written again
    assert run_local(cfg, run_id="again") == 0
    assert before == {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_dir.rglob("*.safetensors")}
