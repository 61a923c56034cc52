"""Run-health checks (trainer.pipeline.run.health): per alert kind, hand values that trip it and values that do not;
the monitor fires once per episode and honours the per-kind off switch."""

from __future__ import annotations

import math

import pytest

from trainer.config.schema import HealthConfig
from trainer.pipeline.run import health
from trainer.pipeline.run.health import HealthMonitor, SampleFacts
from trainer.telemetry import events as ev


def kinds(alerts: list[health.Alert]) -> list[tuple[str, str]]:
    return [(a.kind, a.metric) for a in alerts]


def test_nan_names_every_non_finite_metric() -> None:
    assert health.non_finite_metrics({"a": 1.0, "b": math.nan, "c": -math.inf, "d": 0.0}) == ["b", "c"]
    assert health.non_finite_metrics({"a": 1e30}) == []
    alerts = HealthMonitor(HealthConfig()).check(3, {"actor/pg_loss": math.nan})
    assert kinds(alerts) == [("nan", "actor/pg_loss")] and alerts[0].value is None


def test_entropy_collapse_below_the_minimum_only() -> None:
    assert health.entropy_collapsed(0.01, 0.05) and not health.entropy_collapsed(0.05, 0.05)
    monitor = HealthMonitor(HealthConfig(entropy_min=0.05))
    assert monitor.check(1, {"actor/entropy": 1.3}) == []
    [alert] = monitor.check(2, {"actor/entropy": 0.02})
    assert (alert.kind, alert.metric, alert.value, alert.threshold) == ("entropy_collapse", "actor/entropy", 0.02, 0.05)


def test_length_cap_needs_the_run_to_move_to_the_cap() -> None:
    assert health.length_running_to_cap(0.8, 0.1, 0.5, 0.25)
    assert not health.length_running_to_cap(1.0, 1.0, 0.5, 0.25)  # answers fill the cap from step 1
    assert not health.length_running_to_cap(0.4, 0.0, 0.5, 0.25)
    monitor = HealthMonitor(HealthConfig())
    capped = [SampleFacts(0, 0, "eos", [1, 2]), SampleFacts(0, 1, "length", [1, 2, 3]), SampleFacts(2, 3, "length", [4])]
    assert monitor.check(1, {"response_length/clip_ratio": 0.1}, capped) == []
    [alert] = monitor.check(2, {"response_length/clip_ratio": 0.75}, capped)
    assert alert.kind == "length_cap" and alert.threshold == 0.5 and alert.samples == ((0, 1), (2, 3))
    assert alert.data()["samples"] == [{"group_id": 0, "sample_index": 1}, {"group_id": 2, "sample_index": 3}]


def test_format_collapse_when_the_error_rate_rose_to_its_bound() -> None:
    assert health.risen_to(0.6, 0.1, 0.5, 0.25) and not health.risen_to(0.6, 0.4, 0.5, 0.25)
    monitor = HealthMonitor(HealthConfig())
    assert monitor.check(1, {"env/format_error_rate": 0.1}) == [] and monitor.check(2, {"env/format_error_rate": 0.3}) == []
    [alert] = monitor.check(3, {"env/format_error_rate": 0.7})
    assert (alert.kind, alert.metric, alert.value, alert.threshold) == ("format_collapse", "env/format_error_rate",
                                                                        0.7, 0.5)


def test_repeated_ngram_share_by_hand() -> None:
    # 8 tokens, 4-grams: (1234)(2341)(3412)(4123)(1234) -> 5 grams, 4 distinct -> 1 - 4/5
    assert health.repeated_ngram_share([1, 2, 3, 4, 1, 2, 3, 4], 4) == pytest.approx(0.2)
    assert health.repeated_ngram_share([7] * 10, 2) == pytest.approx(1 - 1 / 9)
    assert health.repeated_ngram_share([1, 2, 3, 4, 5, 6, 7, 8], 4) == 0.0
    assert health.repeated_ngram_share([7, 7, 7], 2) == 0.0  # shorter than 2n: not judged
    loop, fine = [5] * 12, list(range(12))
    samples = [SampleFacts(0, 0, "eos", loop), SampleFacts(0, 1, "eos", fine), SampleFacts(1, 0, "eos", fine),
               SampleFacts(1, 1, "eos", fine)]
    [alert] = HealthMonitor(HealthConfig(repetition_share_max=0.25)).check(1, {}, samples)
    assert (alert.kind, alert.value, alert.samples) == ("repetition", 0.25, ((0, 0),))
    assert HealthMonitor(HealthConfig(repetition_share_max=0.5)).check(1, {}, samples) == []


def test_reward_up_while_eval_down_between_evaluations() -> None:
    assert health.reward_up_eval_down(0.2, 0.5, 0.6, 0.4, 0.05)
    assert not health.reward_up_eval_down(0.2, 0.5, 0.6, 0.58, 0.05)  # eval about flat
    assert not health.reward_up_eval_down(0.5, 0.5, 0.6, 0.3, 0.05)  # training reward flat too: not hacking
    monitor = HealthMonitor(HealthConfig())
    assert monitor.check(10, {"reward/mean": 0.2, "eval/reward/mean": 0.6}) == []
    assert monitor.check(11, {"reward/mean": 0.9}) == []  # no evaluation at this step
    [alert] = monitor.check(20, {"reward/mean": 0.5, "eval/reward/mean": 0.4})
    assert (alert.kind, alert.metric, alert.value) == ("reward_up_eval_down", "eval/reward/mean", 0.4)


@pytest.mark.parametrize(("kind", "metric", "bad", "good"), [
    ("kl_blowup", "actor/ppo_kl", 0.5, 0.01),
    ("kl_blowup", "actor/clipfrac", 0.45, 0.1),
    ("logprob_mismatch", "rollout/logprob_diff_mean", 0.3, 0.02),
])
def test_bounded_metrics(kind: str, metric: str, bad: float, good: float) -> None:
    assert HealthMonitor(HealthConfig()).check(1, {metric: good}) == []
    [alert] = HealthMonitor(HealthConfig()).check(1, {metric: bad})
    assert (alert.kind, alert.metric, alert.value) == (kind, metric, bad)


def test_zero_variance_share_near_1_on_steps_running() -> None:
    assert health.nothing_to_learn([0.95, 0.9, 1.0], 0.9, 3)
    assert not health.nothing_to_learn([0.95, 0.5, 1.0], 0.9, 3) and not health.nothing_to_learn([1.0, 1.0], 0.9, 3)
    monitor = HealthMonitor(HealthConfig(zero_variance_steps=3))
    shares = [1.0, 0.5, 1.0, 0.95]  # a share of 0.5 breaks the run
    assert [monitor.check(step, {"rollout/zero_variance_group_fraction": v}) for step, v in enumerate(shares)] == [[]] * 4
    [alert] = monitor.check(5, {"rollout/zero_variance_group_fraction": 0.92})
    assert (alert.kind, alert.value, alert.threshold) == ("zero_variance", 0.92, 0.9)


def test_grad_spike_against_the_running_median() -> None:
    assert health.grad_norm_spike_bound([1.0, 2.0, 100.0], 10.0, 3) == 20.0  # median 2, not the mean
    assert health.grad_norm_spike_bound([1.0, 2.0], 10.0, 3) is None
    monitor = HealthMonitor(HealthConfig(grad_norm_min_steps=3, grad_norm_factor=10.0))
    for step, norm in enumerate([1.0, 1.2, 0.8, 9.0], start=1):  # 9 < 10 x median 1.0
        assert monitor.check(step, {"actor/grad_norm": norm}) == []
    [alert] = monitor.check(5, {"actor/grad_norm": 50.0})
    assert (alert.kind, alert.threshold) == ("grad_spike", pytest.approx(10 * 1.1))


def test_one_alert_per_episode_and_again_after_it_stayed_clear_for_rearm_steps() -> None:
    assert health.rearm_due(None, 1, 10) and health.rearm_due(3, 14, 10) and not health.rearm_due(3, 13, 10)
    low, high = {"actor/entropy": 0.01}, {"actor/entropy": 1.0}
    pattern = [low, low, high, low, high, high, low]  # hovering at the bound
    monitor = HealthMonitor(HealthConfig(rearm_steps=2))
    assert [len(monitor.check(step, values)) for step, values in enumerate(pattern, start=1)] == [1, 0, 0, 0, 0, 0, 1]
    monitor = HealthMonitor(HealthConfig(rearm_steps=1))  # every trip that follows a clear step
    assert [len(monitor.check(step, values)) for step, values in enumerate(pattern, start=1)] == [1, 0, 0, 1, 0, 0, 1]



def test_the_monitor_state_survives_a_json_round_trip_mid_run() -> None:
    """A monitor restored from the checkpoint's JSON (state_dict / load_state_dict) checks the rest of a run as the
    monitor that never stopped: same alerts, same thresholds; a fresh one re-raises and forgets."""
    import json

    cfg = HealthConfig(grad_norm_min_steps=3, zero_variance_steps=3, eval_divergence=0.05)
    before = [{"actor/entropy": 0.01, "actor/grad_norm": 1.0, "response_length/clip_ratio": 0.1,
               "rollout/zero_variance_group_fraction": 0.95, "reward/mean": 0.2, "eval/reward/mean": 0.5},
              {"actor/entropy": 0.01, "actor/grad_norm": 1.2, "rollout/zero_variance_group_fraction": 0.95},
              {"actor/entropy": 0.01, "actor/grad_norm": 0.8}]
    after = [{"actor/entropy": 0.01, "actor/grad_norm": 50.0, "response_length/clip_ratio": 0.6,
              "rollout/zero_variance_group_fraction": 0.95, "reward/mean": 0.4, "eval/reward/mean": 0.3}]
    whole = HealthMonitor(cfg)
    for step, values in enumerate(before, start=1):
        whole.check(step, values)
    restored = HealthMonitor(cfg)
    restored.load_state_dict(json.loads(json.dumps(whole.state_dict())))
    assert restored.state_dict() == whole.state_dict()
    expected = [("length_cap", "response_length/clip_ratio"), ("reward_up_eval_down", "eval/reward/mean"),
                ("zero_variance", "rollout/zero_variance_group_fraction"), ("grad_spike", "actor/grad_norm")]
    alerts = restored.check(4, after[0])
    assert kinds(alerts) == kinds(whole.check(4, after[0])) == expected  # entropy stays raised at step 1 only
    assert alerts[-1].threshold == pytest.approx(10 * 1.0)
    assert kinds(HealthMonitor(cfg).check(4, after[0])) == [("entropy_collapse", "actor/entropy")]  # fresh: re-raised

def test_off_switches() -> None:
    values = {"actor/entropy": 0.01, "actor/ppo_kl": 1.0}
    assert kinds(HealthMonitor(HealthConfig(disabled=["entropy_collapse"])).check(1, values)) == [
        ("kl_blowup", "actor/ppo_kl")]
    assert HealthMonitor(HealthConfig(enabled=False)).check(1, values) == []
    with pytest.raises(ValueError, match="unknown alert kind"):
        HealthConfig(disabled=["entropy"])


def test_alert_event_contract() -> None:
    alert = health.Alert("length_cap", "response_length/clip_ratio", 0.9, 0.5, "m", ((1, 2),))
    assert ev.alert_data(alert.data())["samples"] == [{"group_id": 1, "sample_index": 2}]
    with pytest.raises(ValueError, match="kind"):
        ev.alert_data({**alert.data(), "kind": "bogus"})
    with pytest.raises(ValueError, match="missing threshold"):
        ev.alert_data({k: v for k, v in alert.data().items() if k != "threshold"})
