"""With one optimizer step per rollout the loop skips the old log-probs forward (π_old = π): the policy
must still learn from that step (issue 45)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file

from tests.trainer.pipeline.conftest import load_cfg, metrics_by_step, run_local


def test_one_update_per_rollout_changes_the_policy(tmp_path: Path) -> None:
    # 4 prompts x 4 samples = 16 = 4 per micro-batch x 4 accumulated, one epoch: one optimizer step;
    # no entropy or KL term, no weight decay and no warmup, so only the policy gradient can move the weights
    cfg = load_cfg(tmp_path, "ppo_epochs=1", "actor_train.training_args.gradient_accumulation_steps=4",
                   "entropy_loss_coef=0", "use_kl_loss=false", "actor_train.training_args.weight_decay=0",
                   "actor_train.training_args.warmup_steps=0", "max_steps=1", "save_steps=1", "eval_steps=0")
    assert run_local(cfg) == 0
    step = metrics_by_step(tmp_path)[1]
    assert "timing/old_log_probs" not in step  # the skip path: no old log-probs forward pass
    assert step["critic/advantages/max"] > 0 > step["critic/advantages/min"]
    assert step["actor/grad_norm"] > 0
    before = load_file(tmp_path / "models" / "tiny-seed0" / "model.safetensors")
    after = load_file(tmp_path / "checkpoints" / "step_1" / "hf_model" / "model.safetensors")
    moved = [name for name, weight in before.items() if not weight.equal(after[name])]
    assert moved, "one optimizer step on a batch with non-zero advantages left every weight unchanged"
