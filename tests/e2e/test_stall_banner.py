"""The watchdog's stall on the run page, in a real Chromium against the real web stack (daphne + ingest), sent
by the trainer's own EventEmitter: a stall appears as a banner with the stacks on the open page without a
reload, and goes when the phase ends after all, leaving the stall in the page's history."""

from __future__ import annotations

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, sign_in

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
