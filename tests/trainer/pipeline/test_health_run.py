"""Run health on real tiny-model runs (CPU, local workers): thresholds that trip emit `alert` events naming the
step, metric, value and threshold (and the samples at the length cap); the demo's defaults emit none."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local
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


def test_demo_defaults_run_clean(tmp_path: Path) -> None:
    cfg = load_cfg(tmp_path, "max_steps=3", "eval_steps=2", "save_steps=100")
    assert run_local(cfg) == 0
    assert events(tmp_path, "alert") == []
    assert len(metrics_by_step(tmp_path)) >= 3
