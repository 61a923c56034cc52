"""Run-health alerts on the run page, in a real Chromium against the real web stack (daphne + ingest), sent by the
trainer's own HealthMonitor through its EventEmitter: the alert list appears on the open page without a reload,
names the step, metric, value and threshold, and its link opens the inspector at that step."""

from __future__ import annotations

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e


def test_an_alert_appears_live_and_links_the_inspector_at_its_step(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus
    from trainer.config.schema import HealthConfig
    from trainer.pipeline.run.health import HealthMonitor, SampleFacts

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


def test_an_alerts_link_opens_the_inspector_on_its_samples_highlighted_and_in_view(page, web_user,
                                                                                   tracking_stack) -> None:
    # a step of 16 groups x 8 samples (the demo's shape) spans three inspector pages of 50; the alert's samples sit in
    # groups 9 and 12 (samples 72.. and 96..: page 2), so the link must open page 2 and scroll to them
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus
    from trainer.config.schema import HealthConfig
    from trainer.pipeline.run.health import HealthMonitor, SampleFacts

    run = make_run(web_user, "health-samples", status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, ray_job_id="job-health-samples", status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack)
    emitter.status("running", 5, total_steps=20)
    capped = {(9, 2), (9, 5), (12, 0)}
    emitter.rollouts([{"prompt": f"copy {g:02d}\n", "response": f"g{g} s{i}", "reward": 0.5, "advantage": 0.0,
                       "prompt_length": 4, "response_length": 3, "stop_reason": "length" if (g, i) in capped else "eos",
                       "group_id": g, "sample_index": i} for g in range(16) for i in range(8)], 5)
    monitor = HealthMonitor(HealthConfig())
    monitor.check(1, {"response_length/clip_ratio": 0.0})
    facts = [SampleFacts(g, i, "length" if (g, i) in capped else "eos", [1]) for g in range(16) for i in range(8)]
    (alert,) = monitor.check(5, {"response_length/clip_ratio": 0.6}, facts)
    ingested(run, emitter.alert(alert.data(), 5).seq)
    sign_in(page, tracking_stack, web_user.user)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    link = page.locator('#run-alerts li[data-kind="length_cap"]').get_by_role("link", name="inspect step 5")
    expect(link).to_be_visible()
    link.click()
    page.wait_for_url("**/rollouts/?*flagged=5.9.2,5.9.5,5.12.0*")
    assert "page=2" in page.url
    flagged = page.locator("#groups .sample.flagged")
    expect(flagged).to_have_count(3)
    assert [flagged.nth(k).get_attribute("data-sample") for k in range(3)] == ["5.9.2", "5.9.5", "5.12.0"]
    expect(page.locator("#flagged-note")).to_have_text("The health alert flagged 3 samples: 3 on this page, outlined.")
    expect(page.locator("#page-label")).to_have_text("page 2 of 3")
    expect(flagged.first).to_be_in_viewport()
    assert page.evaluate("window.scrollY") > 0  # scrolled down to them, not left at the top of the page
    style = flagged.first.evaluate("el => getComputedStyle(el).outlineStyle")
    assert style == "solid" and page.locator('#groups .sample[data-sample="5.9.3"]').evaluate(
        "el => getComputedStyle(el).outlineStyle") == "none"
    shot(page, "run-health-alert-samples")
    emitter.close()
