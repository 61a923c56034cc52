"""Exact resume: a run checkpointed at step k and resumed matches the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.pipeline.conftest import load_cfg, metrics_by_step, run_local


def test_resumed_run_matches_uninterrupted_run(tmp_path: Path) -> None:
    common = ("max_steps=4", "eval_steps=2", "save_steps=2", "seed=7")
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    assert run_local(load_cfg(full_dir, *common)) == 0
    # the same run stopped after step 2 (its checkpoint), then resumed with `latest`
    assert run_local(load_cfg(cut_dir, *common, "max_steps=2")) == 0
    _assert_hf_checkpoint_loads(cut_dir / "checkpoints" / "step_2" / "hf_model")
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest")) == 0

    full, resumed = metrics_by_step(full_dir), metrics_by_step(cut_dir)
    assert sorted(full) == sorted(resumed) == [1, 2, 3, 4]
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        assert keys == {k for k in resumed[step] if not k.startswith("timing/")}
        assert {"actor/pg_loss", "actor/grad_norm", "reward/mean", "actor/entropy"} <= keys
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys
                      if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    # the learning actually moved the policy, so equality is not trivial
    assert full[4]["actor/grad_norm"] > 0 and full[3]["actor/approx_kl"] != full[4]["actor/approx_kl"]


def _assert_hf_checkpoint_loads(path: Path) -> None:
    """The saved policy is a plain transformers checkpoint that differs from the initial weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    initial = AutoModelForCausalLM.from_pretrained(path.parents[2] / "models" / "tiny-seed0", local_files_only=True)
    assert AutoTokenizer.from_pretrained(path, local_files_only=True).eos_token == "<|im_end|>"
    changed = [n for n, p in model.state_dict().items() if not torch.equal(p, initial.state_dict()[n])]
    assert changed, "checkpointed weights equal the initial ones"
