"""Every knob of issue 11's "silently wrong" list acts in the loop: each test runs the tiny GRPO loop
with the knob at two values (same seed, so step 1 generates the same rollouts) and asserts a
difference that only the knob's wiring can cause. Expected values come from hand formulas and
from the run's own rollouts, not from the code under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, load_cfg, metrics_by_step, run_local

ONE_STEP = ("max_steps=1", "eval_steps=0", "save_steps=1000")
TWO_STEPS = ("max_steps=2", "eval_steps=0", "save_steps=1000")


def _run(out: Path, *overrides: str, source: Path | None = None) -> dict[int, dict[str, float]]:
    cfg = load_cfg(out, *overrides) if source is None else load_cfg(out, *overrides, source=source)
    assert run_local(cfg) == 0
    return metrics_by_step(out)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, float]]]:
    out = tmp_path_factory.mktemp("baseline")
    return out, _run(out, *ONE_STEP)


def test_kl_ctrl_type_picks_the_controller(tmp_path: Path) -> None:
    """Same target_kl, two kl_ctrl_type values: only adaptive moves β after step 1 (Ziegler et al.)."""
    kl = ("add_token_level_kl=true", "init_kl_coef=0.1", "target_kl=0.1", "kl_horizon=100",
          "reference.model_args.model_name_or_path=${pretrain}", "reference.device_mapping=[0]", *TWO_STEPS)
    fixed = _run(tmp_path / "fixed", *kl, "kl_ctrl_type=fixed")
    adaptive = _run(tmp_path / "adaptive", *kl, "kl_ctrl_type=adaptive")
    assert fixed[1]["actor/kl_coef"] == adaptive[1]["actor/kl_coef"] == pytest.approx(0.1)
    assert fixed[2]["actor/kl_coef"] == pytest.approx(0.1)
    # β₂ = β₁·(1 + clip(KL₁/target − 1, −0.2, 0.2)·n/horizon), n = 4 prompts × 4 samples
    error = min(max(adaptive[1]["actor/reward_kl"] / 0.1 - 1, -0.2), 0.2)
    assert adaptive[2]["actor/kl_coef"] == pytest.approx(0.1 * (1 + error * 16 / 100))
    assert adaptive[2]["actor/kl_coef"] != pytest.approx(0.1)
    # verl's names for the same two numbers
    assert adaptive[2]["actor/reward_kl_penalty_coeff"] == adaptive[2]["actor/kl_coef"]
    assert adaptive[1]["actor/reward_kl_penalty"] == adaptive[1]["actor/reward_kl"]


def test_gspo_uses_the_configured_clip_range(tmp_path: Path) -> None:
    """After the first optimizer step the sequence ratios move: a clip range of 1e-6 clips more tokens
    than 0.2 (with the loss's own defaults, 3e-4 / 4e-4, both runs would be the same)."""
    wide = _run(tmp_path / "wide", "policy_loss=gspo", "pg_clip=0.2", *ONE_STEP)
    narrow = _run(tmp_path / "narrow", "policy_loss=gspo", "pg_clip=1e-6", *ONE_STEP)
    assert narrow[1]["actor/clipfrac"] > wide[1]["actor/clipfrac"]
    assert narrow[1]["actor/pg_loss"] != pytest.approx(wide[1]["actor/pg_loss"], abs=1e-7)
    assert narrow[1]["actor/pg_clipfrac"] == narrow[1]["actor/clipfrac"]
    high_only = _run(tmp_path / "high", "policy_loss=gspo", "pg_clip=0.2", "pg_clip_low=1e-6",
                     "pg_clip_high=1e-6", *ONE_STEP)
    assert high_only[1]["actor/clipfrac"] == narrow[1]["actor/clipfrac"]


def test_difficulty_mask_drops_groups_from_the_actor_loss(
    tmp_path: Path, baseline: tuple[Path, dict[int, dict[str, float]]]
) -> None:
    base_dir, base = baseline
    samples = events(base_dir, "rollouts")[0]["data"]["samples"]
    assert len(samples) == 16  # every sample of step 1 (4 prompts × 4)
    groups: dict[int, list[float]] = {}
    for s in samples:
        groups.setdefault(s["group_id"], []).append(s["reward"])
    means = sorted({sum(v) / len(v) for v in groups.values()})
    assert len(means) > 1, "all groups scored alike; pick another seed"
    high = (means[0] + means[1]) / 2  # keeps the hardest group(s) only
    expected = sum(len(v) for v in groups.values() if sum(v) / len(v) < high) / 16

    masked = _run(tmp_path / "masked", "difficulty_mask=true", "difficulty_low_threshold=0.0",
                  f"difficulty_high_threshold={high}", *ONE_STEP)
    assert masked[1]["actor/difficulty_mask_ratio"] == pytest.approx(expected)
    assert masked[1]["reward/mean"] == base[1]["reward/mean"]  # the same rollouts ...
    assert masked[1]["actor/entropy"] != pytest.approx(base[1]["actor/entropy"], abs=1e-7)  # ... another loss


def test_add_len_reward_adds_the_length_bonus(tmp_path: Path) -> None:
    """Responses cut at 2 of response_length 4 tokens: each reward gains 1 − len/4."""
    short = ("actor_infer.generating_args.max_new_tokens=2", *ONE_STEP)
    off = _run(tmp_path / "off", *short)
    on = _run(tmp_path / "on", *short, "add_len_reward=true")
    bonus = 1 - on[1]["response_length/mean"] / 4
    assert bonus > 0
    assert on[1]["critic/rewards/mean"] - off[1]["critic/rewards/mean"] == pytest.approx(bonus, abs=1e-5)
    assert on[1]["reward/mean"] == off[1]["reward/mean"]  # the raw score is unchanged


def test_length_loss_weight_weights_the_policy_loss(tmp_path: Path) -> None:
    # stopping at any of half the byte tokens gives responses of varied length
    varied = (f"actor_infer.generating_args.stop_token_ids=[{','.join(map(str, range(0, 256, 2)))}]", *ONE_STEP)
    off = _run(tmp_path / "off", *varied)
    on = _run(tmp_path / "on", *varied, "length_loss_weight=true")
    assert off[1]["response_length/min"] < off[1]["response_length/max"]
    assert on[1]["reward/mean"] == off[1]["reward/mean"]
    assert on[1]["actor/pg_loss"] != pytest.approx(off[1]["actor/pg_loss"], abs=1e-7)


def test_difficulty_loss_weight_reads_the_data_column(tmp_path: Path) -> None:
    from trainer.data.synthetic import get_task

    rows = get_task("copy").make_prompts(64, 0, length=3, alphabet="abcde")
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({**r, "difficulty": (i % 5) / 4}) + "\n" for i, r in enumerate(rows)))
    from_file = ("~actor_train.data_args.synthetic", f"actor_train.data_args.file_name={data}", *ONE_STEP)
    off = _run(tmp_path / "off", *from_file)
    on = _run(tmp_path / "on", *from_file, "difficulty_loss_weight=true")
    assert on[1]["reward/mean"] == off[1]["reward/mean"]
    assert on[1]["actor/pg_loss"] != pytest.approx(off[1]["actor/pg_loss"], abs=1e-7)


def test_difficulty_loss_weight_without_the_column_fails_at_start(tmp_path: Path) -> None:
    from trainer.pipeline.runner import RunIdentity, run_training

    lines: list[str] = []
    cfg = load_cfg(tmp_path, "difficulty_loss_weight=true", *ONE_STEP)
    assert run_training(cfg, RunIdentity(run_id="t"), backend="local", log=lines.append) != 0
    status = events(tmp_path, "status")[-1]["data"]
    assert status["state"] == "failed" and "difficulty" in status["message"]


def test_val_greedy_and_val_n_sample_drive_evaluation(tmp_path: Path) -> None:
    """Greedy evaluation with a sampling validation config equals the default (greedy) evaluation;
    val_n_sample sets the responses per eval prompt."""
    evaluate = ("max_steps=1", "eval_steps=1", "save_steps=1000")
    sampling = ("validation.generating_args.do_sample=true", "validation.generating_args.temperature=1.0")
    default = _run(tmp_path / "default", *evaluate)
    greedy = _run(tmp_path / "greedy", *evaluate, *sampling, "val_greedy=true", "val_n_sample=2")
    sampled = _run(tmp_path / "sampled", *evaluate, *sampling, "val_greedy=false")
    prompts = default[1]["eval/num_samples"]
    assert prompts == 8  # val_batch_size eval prompts, one response each
    assert greedy[1]["eval/num_samples"] == 2 * prompts
    assert greedy[1]["eval/reward/mean"] == pytest.approx(default[1]["eval/reward/mean"])
    assert sampled[1]["eval/reward/mean"] != pytest.approx(default[1]["eval/reward/mean"])


def test_loop_logs_verl_metric_names(baseline: tuple[Path, dict[int, dict[str, float]]], tmp_path: Path) -> None:
    _, base = baseline
    step = base[1]
    assert step["actor/pg_clipfrac"] == step["actor/clipfrac"]
    assert step["actor/pg_clipfrac_lower"] == 0.0  # no dual clip in the demo
    assert step["actor/ppo_kl"] != 0.0  # the second mini-batch runs on a moved policy
    assert step["critic/score/mean"] == pytest.approx(step["reward/mean"])
    assert step["response_length/clip_ratio"] == 1.0  # every response runs to max_new_tokens = 4
    assert step["response_length/min"] == step["response_length/max"] == 4.0
    assert step["prompt_length/mean"] == len("copy abc\n")  # template none: the raw prompt bytes
    for name in ("actor/entropy", "actor/pg_loss", "critic/rewards/mean", "critic/advantages/mean",
                 "critic/advantages/max", "critic/advantages/min", "prompt_length/clip_ratio"):
        assert name in step, name

    ppo = _run(tmp_path / "ppo", "max_steps=1", "eval_steps=0", "save_steps=1000",
               "critic.training_args.per_device_train_batch_size=4",
               "critic.training_args.gradient_accumulation_steps=2",
               source=REPO_ROOT / "examples" / "demo_ppo_cpu.yaml")[1]
    for name in ("critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "critic/returns/mean",
                 "critic/returns/max", "critic/values/min"):
        assert name in ppo, name
    assert ppo["critic/values/mean"] == ppo["critic/values_mean"] == 0.0  # zero-initialised value head
