"""Issue 35's smaller items that only a browser shows, in a real Chromium against the web stack:
- compare counts as live only the runs whose status is live (it said "3 of 3 runs live" for finished runs:
  it counted open websockets);
- the button that confirms a cancel looks destructive (the `danger` style of every destructive button).
"""

from __future__ import annotations

import uuid

import pytest

from tests.platform.web_stack import sign_in

pytestmark = pytest.mark.e2e
DANGER_RED = "rgb(198, 40, 40)"  # --bad in policylab.css, the background of button.danger


def make_run(web_user, status: str):
    from policylab.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(project=web_user.project, name=f"small {uuid.uuid4().hex[:6]}",
                                           config={"max_steps": 20}, config_yaml="max_steps: 20\n",
                                           config_hash=uuid.uuid4().hex)
    return Run.objects.create(experiment=experiment, created_by=web_user.user, status=status)


def test_compare_counts_only_runs_whose_status_is_live(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    done = [make_run(web_user, status) for status in ("succeeded", "failed", "cancelled")]
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/compare/?runs={','.join(str(r.pk) for r in done)}")
    expect(page.locator(f'[data-run-status="{done[0].pk}"]')).to_have_text("succeeded")
    expect(page.locator("#live-runs")).to_have_text("· 0 of 3 runs live")  # before: "· 3 of 3 runs live"
    running = make_run(web_user, "running")
    page.goto(f"{tracking_stack.url}/compare/?runs={done[0].pk},{running.pk}")
    expect(page.locator("#live-runs")).to_have_text("· 1 of 2 runs live")


def test_the_cancel_confirmation_button_is_styled_as_destructive(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    run = make_run(web_user, "running")
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#cancel-run")).to_be_visible()
    page.click("#cancel-run")
    yes = page.locator("#confirm-yes")
    expect(yes).to_have_text("Cancel the run")
    expect(yes).to_have_class("danger")  # before: no class, the accent blue of every button
    assert yes.evaluate("(b) => getComputedStyle(b).backgroundColor") == DANGER_RED
    page.click("#confirm-no")
    run.refresh_from_db()
    assert not run.cancel_requested  # "keep things as they are" cancelled nothing
