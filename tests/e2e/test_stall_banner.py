"""The watchdog's stall on the run page, in a real Chromium against the real web stack (daphne + ingest), sent
by the trainer's own EventEmitter: a stall appears as a banner with the stacks on the open page without a
reload, and goes when the phase ends after all, leaving the stall in the page's history."""

from __future__ import annotations

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e


def test_a_stall_is_a_banner_with_stacks_and_its_end_leaves_it_in_the_history(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus

    run = make_run(web_user, "stalls", status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, ray_job_id="job-stall", status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack)
    emitter.status("running", 3, total_steps=20)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#run-stalls")).to_be_hidden()

    emitter.stall({"state": "stalled", "phase": "generate", "elapsed_s": 12.0, "bound_s": 5.0, "on_stall": "wait",
                   "summary": "phase generate has run 12 s, past its bound of 5.0 s; waiting on actor_infer rank 0 "
                              "in generate",
                   "waiting": [{"role": "actor_infer", "method": "generate", "ranks": [0]}],
                   "stacks": "== actor_infer rank 0 in generate (pid 4242)\nThread 4242 (idle): \"MainThread\"\n"
                             "    sample_next_tokens (trainer/rollout/hf.py:120)",
                   "file": "stalls/attempt-1-stall-1.txt"}, 3)
    banner = page.locator("#run-stalls .stall-banner")
    expect(banner).to_contain_text("stalled in generate")
    expect(banner).to_contain_text("waiting on actor_infer rank 0 in generate")
    expect(banner.locator(".stall-stacks pre")).to_contain_text("sample_next_tokens (trainer/rollout/hf.py:120)")
    shot(page, "run-stall-banner")

    emitter.stall({"state": "recovered", "phase": "generate", "elapsed_s": 19.5}, 3)
    expect(banner).to_have_count(0)
    history = page.locator("#run-stalls .stall-history")
    expect(history).to_contain_text("ended by itself after 19.5 s")
    emitter.close()


def test_a_stalled_run_says_so_in_its_status_title_and_eta_and_each_stall_says_how_it_ended(
        page, web_user, tracking_stack) -> None:
    """Issue 46 item 4: while the banner shows a stall the page said "running" with an ETA; the stall list said
    "the attempt ended" of stalls whose phase ended by itself or whose attempt was restarted from a checkpoint."""
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus

    run = make_run(web_user, "stall states", status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, ray_job_id="job-a1", status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, ray_job_id="job-a2", status=RunStatus.RUNNING)
    first = emitter_for(run, tracking_stack, attempt=1)  # attempt 1 stalled; the watchdog restarted it
    first.stall({"state": "stalled", "phase": "reward", "elapsed_s": 0.043, "bound_s": 0.01,
                 "on_stall": "restart_from_checkpoint", "summary": "phase reward has run 43 ms, past its bound of 10 ms",
                 "waiting": [], "stacks": "== driver", "file": "stalls/attempt-1-stall-1.txt"}, 2)
    first.close()
    second = emitter_for(run, tracking_stack, attempt=2)
    ingested(run, second.status("running", 3, total_steps=20, eta_s=125.0).seq)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#run-state")).to_have_text("running")
    expect(page.locator("#run-eta")).to_have_text("2 min 5 s")
    restarted = page.locator('#run-stalls .stall-history li[data-ended="restarted"]')
    expect(restarted).to_contain_text("attempt 2 restarted from the latest checkpoint")  # was "the attempt ended"

    second.stall({"state": "stalled", "phase": "generate", "elapsed_s": 0.5, "bound_s": 0.2, "on_stall": "wait",
                  "summary": "phase generate has run 500 ms, past its bound of 200 ms", "waiting": [],
                  "stacks": "== driver", "file": "stalls/attempt-2-stall-1.txt"}, 3)
    expect(page.locator("#run-stalls .stall-banner")).to_contain_text("stalled in generate")
    expect(page.locator("#run-state")).to_have_text("stalled")  # was "running"
    expect(page).to_have_title(f"Run {run.pk} (stalled) · {run.experiment.name} · PolicyLab")
    expect(page.locator("#run-eta")).to_have_text("— (stalled)")  # was a ticking "2 min 5 s"
    second.status("running", 3, total_steps=20, eta_s=118.0)  # a status while stalled does not bring the ETA back
    page.wait_for_timeout(1500)
    expect(page.locator("#run-state")).to_have_text("stalled")
    expect(page.locator("#run-eta")).to_have_text("— (stalled)")
    rendered = page.request.get(f"{tracking_stack.url}/runs/{run.pk}/").text()  # the server's page, before any script
    assert f"<title>Run {run.pk} (stalled) · " in rendered and ">stalled</span>" in rendered
    page.reload()  # opened while stalled: recovering must still take "(stalled)" out of the title
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page).to_have_title(f"Run {run.pk} (stalled) · {run.experiment.name} · PolicyLab")

    second.stall({"state": "recovered", "phase": "generate", "elapsed_s": 0.75}, 3)
    expect(page.locator("#run-stalls .stall-banner")).to_have_count(0)
    expect(page.locator("#run-state")).to_have_text("running")
    expect(page).to_have_title(f"Run {run.pk} · {run.experiment.name} · PolicyLab")
    expect(page.locator("#run-eta")).to_have_text("1 min 58 s")
    recovered = page.locator('#run-stalls .stall-history li[data-ended="recovered"]')
    expect(recovered).to_contain_text("recovered: the phase ended by itself after 750 ms")  # not "0.8 s" or "0.0 s"
    expect(page.locator('#run-stalls .stall-history li[data-ended="attempt-ended"]')).to_have_count(0)
    second.close()
