"""In a real Chromium: sign in, edit the generated form, see an inline error, fix it, save, launch,
and watch the run's status change as the real Celery worker hands it to a real Ray head."""

from __future__ import annotations

import re
import time

import pytest

pytestmark = pytest.mark.e2e


def test_edit_validate_save_launch_and_watch_the_status(signed_in, live_server, web_user, live_celery):
    from playwright.sync_api import expect

    from policylab.experiments.models import Experiment, Run
    from policylab.experiments.services import request_cancel

    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    page.fill("#exp-name", "browser grpo")
    expect(page.locator("#check-state")).to_have_text("valid")  # the live check of the starting config
    expect(page.locator("#derived")).to_contain_text("actor_train.optimizer_steps_per_rollout")

    # A bad value: the error appears at the field, from the server's validation of the whole config.
    page.fill("[name=rollout_batch_size]", "0")
    error = page.locator('[data-errors-for="rollout_batch_size"]')
    expect(error).to_be_visible()
    expect(error).to_contain_text("greater than or equal to 1")
    expect(page.locator('.field.has-error[data-path="rollout_batch_size"]')).to_have_count(1)
    page.click("#save")  # the server refuses too, and renders the same error inline
    expect(page.locator('[data-errors-for="rollout_batch_size"]')).to_contain_text("greater than or equal to 1")
    assert not Experiment.objects.exists()

    page.fill("[name=rollout_batch_size]", "8")
    expect(page.locator("#check-state")).to_have_text("valid")
    expect(error).to_be_hidden()
    page.click("[data-tab=yaml]")  # the YAML tab shows the same config ...
    yaml_box = page.locator("#config-yaml")
    expect(yaml_box).to_have_value(re.compile(r"^rollout_batch_size: 8$", re.M))
    yaml_box.fill(re.sub(r"(?m)^rollout_batch_size: 8$", "rollout_batch_size: 32", yaml_box.input_value()))
    page.click("[data-tab=form]")  # ... and an edit there comes back into the form
    expect(page.locator("[name=rollout_batch_size]")).to_have_value("32")
    expect(page.locator("#check-state")).to_have_text("valid")
    page.click("#save")

    page.wait_for_url(re.compile(r"/experiments/\d+/$"))
    experiment = Experiment.objects.get(name="browser grpo")
    assert experiment.config["rollout_batch_size"] == 32
    page.click("summary:has-text('Overrides')")
    page.fill("textarea[name=overrides]", "max_steps=2")
    page.click("#launch")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(experiment=experiment)
    expect(page.locator("#run-state")).to_have_text(re.compile("queued|submitting|running|succeeded"))

    # live_server speaks plain HTTP (no websocket), so the page is reloaded until the supervisor
    # has picked the run up; the live updates themselves are tested in test_tracking.py.
    state = page.locator("#run-state")
    deadline = time.monotonic() + 60
    while state.inner_text() == "queued" and time.monotonic() < deadline:
        page.wait_for_timeout(1000)
        page.reload()
    expect(state).to_have_text(re.compile("submitting|starting|running|succeeded|failed"))
    run.refresh_from_db()
    assert run.attempts.exists()
    if run.is_active:  # don't leave training running on the shared Ray head
        request_cancel(run)
