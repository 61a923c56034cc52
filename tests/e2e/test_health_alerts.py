"""Run-health alerts on the run page, in a real Chromium against the real web stack (daphne + ingest), sent by the
trainer's own HealthMonitor through its EventEmitter: the alert list appears on the open page without a reload,
names the step, metric, value and threshold, and its link opens the inspector at that step."""

from __future__ import annotations

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, sign_in

pytestmark = pytest.mark.e2e


def test_an_alert_appears_live_and_links_the_inspector_at_its_step(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus
    from trainer.config.schema import HealthConfig
    from trainer.pipeline.health import HealthMonitor, SampleFacts

    run = make_run(web_user, "health", status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, ray_job_id="job-health", status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack)
    emitter.status("running", 7, total_steps=20)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#run-alerts")).to_be_hidden()

    monitor = HealthMonitor(HealthConfig())
    monitor.check(1, {"response_length/clip_ratio": 0.0})
    samples = [SampleFacts(2, 0, "length", [1, 2]), SampleFacts(2, 1, "eos", [3])]
    for alert in monitor.check(7, {"actor/entropy": 0.01, "response_length/clip_ratio": 0.5}, samples):
        emitter.alert(alert.data(), 7)
    alerts = page.locator("#run-alerts")
    expect(alerts).to_be_visible()
    expect(alerts.locator("h2")).to_contain_text("2 alerts")
    entropy = alerts.locator('li[data-kind="entropy_collapse"]')
    expect(entropy).to_contain_text("entropy_collapse at step 7")
    expect(entropy).to_contain_text("actor/entropy = 0.01 (threshold 0.05)")
    expect(alerts.locator('li[data-kind="length_cap"]')).to_contain_text("samples: group 2 #0")
    shot(page, "run-health-alerts")
    entropy.get_by_role("link", name="inspect step 7").click()
    page.wait_for_url(f"**/runs/{run.pk}/rollouts/?step_min=7&step_max=7&step=7&latest=0")
    emitter.close()
