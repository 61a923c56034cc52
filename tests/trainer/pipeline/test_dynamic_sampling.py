"""Dynamic sampling on the real tiny GRPO demo (issue 36): with a std_filter at 0 and
is_use_additional_prompts, no group whose rewards are all equal reaches the loss and replacement
prompts are drawn; without them such groups are trained. The ledger accounts for every prompt drawn,
and a run resumed from a checkpoint reproduces the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local
from trainer.pipeline.run.ledger import LEDGER_FILE, account, read_ledger

# 2 samples per prompt: groups of equal rewards are frequent on the copy task's partial-credit reward
SMALL_GROUPS = ("num_return_sequences_in_group=2", "actor_train.training_args.gradient_accumulation_steps=2",
                "actor_train.training_args.per_device_train_batch_size=4", "eval_steps=0", "seed=3")
DYNAMIC = ("rewards.synthetic.query_filter_config.type=std_filter",
           "rewards.synthetic.query_filter_config.filter_args.std_threshold=0", "is_use_additional_prompts=true",
           "max_additional_running_prompts=16")
STEPS = 4


def _run(out: Path, *overrides: str) -> dict[int, dict[str, float]]:
    assert run_local(load_cfg(out, *SMALL_GROUPS, f"max_steps={STEPS}", "save_steps=2", *overrides)) == 0
    return metrics_by_step(out)


def _ledger_ok(out: Path):
    verdict = account(*read_ledger(out / LEDGER_FILE))
    assert verdict.ok, (verdict.lost, verdict.duplicated, verdict.problems)
    return verdict


def test_dynamic_sampling_trains_no_zero_variance_group_and_refills(tmp_path: Path) -> None:
    plain = _run(tmp_path / "plain")
    dynamic = _run(tmp_path / "dynamic", *DYNAMIC)
    steps = range(1, STEPS + 1)
    assert sum(plain[s]["rollout/zero_variance_group_fraction"] for s in steps) > 0  # without: trained
    assert all(dynamic[s]["rollout/zero_variance_group_fraction"] == 0 for s in steps)
    assert all(dynamic[s]["rollout/filler_group_fraction"] == 0 for s in steps)
    assert sum(dynamic[s]["rollout/extra_prompts"] for s in steps) > 0
    assert all(dynamic[s]["actor/query_filter_mask_ratio"] == 1.0 for s in steps)  # every trained group passes
    # step 1's own prompts, same seed and weights as the plain run's: its reward, before any replacement
    assert abs(dynamic[1]["rollout/drawn_reward_mean"] - plain[1]["reward/mean"]) < 1e-6
    assert dynamic[1]["rollout/drawn_reward_mean"] != dynamic[1]["reward/mean"]  # the trained batch's is biased
    # the trained batch keeps its shape: 4 prompts × 2 samples per step, as in the plain run
    for run_dir in (tmp_path / "plain", tmp_path / "dynamic"):
        assert [len(e["data"]["samples"]) for e in events(run_dir, "rollouts")] == [8] * STEPS

    verdict = _ledger_ok(tmp_path / "dynamic")
    extra = sum(dynamic[s]["rollout/extra_prompts"] for s in steps)
    assert verdict.extra_prompts == extra and verdict.filtered_prompts == extra  # each replaced one left out
    assert verdict.trained_samples == 8 * STEPS
    assert _ledger_ok(tmp_path / "plain").extra_prompts == 0


def test_when_no_group_passes_within_the_budget_none_is_trained_and_the_actor_does_not_step(tmp_path: Path) -> None:
    # top_k 1: every response of a prompt is the same, so every group is flat and the budget runs out
    flat = _run(tmp_path / "flat", *DYNAMIC[:3], "max_additional_running_prompts=4",
                "actor_infer.generating_args.top_k=1", "max_steps=2")
    for values in flat.values():
        assert values["rollout/extra_prompts"] == 4 and values["rollout/filler_group_fraction"] == 1.0
        assert values["rollout/zero_variance_group_fraction"] == 0.0  # the fallback does not re-admit them
        assert values["actor/final_mask_ratio"] == 0.0
        assert not any(key.startswith("actor/pg") for key in values)  # no actor update
    assert _ledger_ok(tmp_path / "flat").extra_prompts == 8


def test_a_query_filter_without_replacement_only_masks_the_loss(tmp_path: Path) -> None:
    masked = _run(tmp_path / "masked", *DYNAMIC[:2])
    assert all(masked[s]["rollout/zero_variance_group_fraction"] == 0 or masked[s]["actor/query_filter_mask_ratio"]
               == 1.0 for s in range(1, STEPS + 1))
    assert any(masked[s]["actor/query_filter_mask_ratio"] < 1.0 for s in range(1, STEPS + 1))
    assert "rollout/extra_prompts" not in masked[1]
    assert _ledger_ok(tmp_path / "masked").extra_prompts == 0


def test_dynamic_sampling_resumes_exactly(tmp_path: Path) -> None:
    full = _run(tmp_path / "full", *DYNAMIC)
    cut = tmp_path / "cut"
    _run(cut, *DYNAMIC, "max_steps=2")
    resumed = _run(cut, *DYNAMIC, "resume_from_checkpoint=latest")
    for step in (3, 4):
        keys = {k for k in full[step] if not k.startswith("timing/")}
        mismatched = {k: (full[step][k], resumed[step][k]) for k in keys if abs(full[step][k] - resumed[step][k]) > 1e-6}
        assert not mismatched, f"step {step}: {mismatched}"
    assert _ledger_ok(cut).attempts == 2
