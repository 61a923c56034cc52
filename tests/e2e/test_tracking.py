"""In a real Chromium against the real ASGI server (daphne: HTTP + websockets) and the real ingest
process (`manage.py ingest_events`): a run emits telemetry through the trainer's own EventEmitter
(events.jsonl + Redis Stream), and the page follows it live — the reward chart gains points without
a reload, the rollout inspector shows the current step, the checkpoint list grows, and resuming
from a checkpoint continues the same series.

The events come from trainer.telemetry driven by the test (not a Ray job): the test owns the timing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.platform.web_stack import (
    CELERY_CHANNELS_PREFIX,
    TrackingStack,
    off_the_browser_thread,
    share_channels,
    sign_in,
    start_tracking_stack,
)
from tests.services import claim_redis_db

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tracking_stack(transactional_db, redis_url: str, settings, tmp_path: Path) -> Iterator[TrackingStack]:
    """The stack on a Redis database of this test's own."""
    claimed, release = claim_redis_db(redis_url)
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    try:
        with start_tracking_stack(claimed, settings.POLICYLAB_RUNS_DIR, tmp_path) as stack:
            yield stack
    finally:
        release()


def samples(step: int, attempt: int) -> list[dict]:
    return [
        {"prompt": f"What is {g} + {step}?", "response": f"attempt {attempt} says {g + step + i % 2}", "reward": float(i % 2 == 0),
         "advantage": 0.5 if i % 2 == 0 else -0.5, "prompt_length": 6, "response_length": 4, "stop_reason": "eos",
         "group_id": g, "sample_index": i, "tokens": ["attempt", " ", str(attempt)], "token_logprobs": [-0.1, -2.0, -0.5]}
        for g in range(2) for i in range(2)
    ]


def emit_step(emitter, step: int, total: int = 12) -> None:
    attempt = emitter.attempt
    emitter.metrics({"reward/mean": step / 10 + attempt / 100, "actor/kl": 0.01 * step, "timing/step_s": 0.2}, step)
    emitter.rollouts(samples(step, attempt), step)
    emitter.system({"cpu/percent": 40.0 + step, "memory/rss_gb": 1.2}, step)
    emitter.log("info", [f"attempt {attempt} finished step {step}"], step)
    emitter.status("running", step, total_steps=total, eta_s=(total - step) * 0.2)


def test_run_page_follows_a_live_run_and_resume_continues_the_series(page, web_user, tracking_stack, settings) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import Experiment, Run, RunStatus
    from policylab.jobs.supervisor import Step, finish
    from trainer.telemetry import EventEmitter, JsonlSink
    from trainer.telemetry.redis_stream import RedisStreamSink

    experiment = Experiment.objects.create(
        project=web_user.project, name="live grpo", config={"exp_name": "live", "max_steps": 12},
        config_yaml="exp_name: live\n", config_hash=uuid.uuid4().hex,
    )
    run = Run.objects.create(experiment=experiment, created_by=web_user.user, status=RunStatus.RUNNING)

    def open_emitter(attempt: int) -> EventEmitter:
        sinks = [JsonlSink(run.run_dir / "events.jsonl"), RedisStreamSink(tracking_stack.redis_url, run.trainer_run_id)]
        return EventEmitter(run.trainer_run_id, attempt, sinks)

    def chart_steps() -> list[int]:
        return page.evaluate("() => window.policylab.metrics.xy('reward/mean', 'step').steps")

    def save_checkpoint(emitter: EventEmitter, step: int) -> None:
        path = run.run_dir / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)  # what the trainer's save leaves; only checkpoints on disk are resumable
        emitter.checkpoint(step, str(path), 4096, ["model", "optimizer"])

    share_channels(settings, tracking_stack)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    assert page.evaluate("() => typeof window.Plotly") == "object"  # plotly.js served locally
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if the page ever reloads

    emitter = open_emitter(1)
    emitter.status("running", 0, total_steps=12)
    for step in range(1, 5):
        emit_step(emitter, step)
        if step % 2 == 0:
            save_checkpoint(emitter, step)
    reward_chart = page.locator('div.chart[data-key="reward/mean"]')
    expect(reward_chart).to_have_attribute("data-points", "4")
    expect(reward_chart.locator(".main-svg").first).to_be_visible()
    expect(page.locator("#checkpoints tbody tr")).to_have_count(2)
    expect(page.locator("#run-step")).to_have_text("4")
    expect(page.locator('section[data-group="actor"] div.chart[data-key="actor/kl"]')).to_be_visible()
    expect(page.locator('div.chart[data-key="cpu/percent"]')).to_be_visible()

    for step in (5, 6):
        emit_step(emitter, step)
    save_checkpoint(emitter, 6)
    expect(reward_chart).to_have_attribute("data-points", "6")  # new points, no reload
    expect(page.locator("#checkpoints tbody tr")).to_have_count(3)  # the list grew
    expect(page.locator("#latest-rollouts")).to_have_attribute("data-step", "6")
    expect(page.locator("#log-tail")).to_contain_text("attempt 1 finished step 6")
    assert page.evaluate("() => window.__sameDocument") is True

    # The rollout inspector shows the samples of the current step, GRPO groups side by side.
    inspector = page.context.new_page()
    inspector.goto(f"{tracking_stack.url}/runs/{run.pk}/rollouts/")
    expect(inspector.locator("section.group")).to_have_count(2)
    expect(inspector.locator('section.group[data-step="6"]')).to_have_count(2)
    expect(inspector.locator('section.group[data-step="6"] .sample')).to_have_count(4)
    expect(inspector.locator(".tokens span").first).to_have_text("attempt")  # per-token view
    inspector.fill("input[name=q]", "(unclosed")  # plain text, not a pattern (issue 34): nothing holds it
    inspector.click("#filters button[type=submit]")
    expect(inspector.locator("#rollout-summary")).to_contain_text("0 samples match")
    expect(inspector.locator("#rollout-error")).to_have_text("")
    inspector.close()

    # Attempt 1 dies (the trainer says so; the supervisor, out of retries, records it); resuming from its
    # latest checkpoint (step 6), after a confirmation saying so, continues the same run.
    emitter.status("failed", 6, total_steps=12, message="worker lost")
    emitter.close()
    expect(page.locator("#run-message")).to_have_text("attempt 1 failed: worker lost")
    expect(page.locator("#run-state")).to_have_text("running")  # failing is the supervisor's verdict
    off_the_browser_thread(lambda: finish(run, None, Step("finish", RunStatus.FAILED, RunStatus.FAILED, "worker lost")))
    expect(page.locator("#run-state")).to_have_text("failed")
    page.locator('#checkpoints tr[data-step="6"] button[data-resume]').click()
    expect(page.locator("#confirm-text")).to_contain_text(f"Run {run.pk} continues from its checkpoint at step 6")
    page.click("#confirm-yes")
    expect(page.locator("#run-state")).to_have_text("queued")
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED and run.resume_from.endswith("step_6")

    emitter = open_emitter(2)  # what the resumed trainer does: same events.jsonl, seq continues
    assert emitter.seq > 0
    emitter.status("running", 6, total_steps=12)
    for step in (7, 8, 9):
        emit_step(emitter, step)
    emitter.close()
    reward_chart.scroll_into_view_if_needed()  # charts off screen are redrawn when they come back into view
    expect(reward_chart).to_have_attribute("data-points", "9")
    assert chart_steps() == list(range(1, 10))  # one unbroken series, no duplicated step
    expect(page.locator("#run-state")).to_have_text("running")
    expect(page.locator("#log-tail")).to_contain_text("attempt 2 finished step 9")
    assert page.evaluate("() => window.__sameDocument") is True

    # History lists the run; ticking it and "Compare" overlays its curves.
    page.goto(f"{tracking_stack.url}/history/?q=live")
    page.check(f"input[type=checkbox][value='{run.pk}']")
    page.click("#compare-form button[type=submit]")
    expect(page.locator('div.chart[data-key="reward/mean"]')).to_have_attribute("data-points", "9")


def test_a_real_trainer_run_launched_through_the_platform_streams_to_the_page(
    page, web_user, live_celery, settings, tmp_path: Path
) -> None:
    """The demo GRPO config, launched like the "Launch" button does: Celery supervises a Ray job
    running `python -m trainer run`, whose events reach this page through ingest and the websocket."""
    from playwright.sync_api import expect

    from policylab.experiments import services
    from policylab.experiments.models import RunStatus

    demo = (REPO_ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    experiment = services.create_experiment(web_user.project, "real demo", demo, user=web_user.user)
    runs_dir = Path(live_celery.env["POLICYLAB_RUNS_DIR"])
    settings.POLICYLAB_RUNS_DIR = runs_dir
    with start_tracking_stack(live_celery.env["REDIS_URL"], runs_dir, tmp_path, CELERY_CHANNELS_PREFIX) as stack:
        sign_in(page, stack, web_user.user)
        run = services.launch_run(experiment, web_user.user, ["max_steps=6", "save_steps=3", "eval_steps=100"])
        try:
            page.goto(f"{stack.url}/runs/{run.pk}/")  # before the Ray job has started
            expect(page.locator("#live-state")).to_have_text("live")
            points = "() => Number(document.querySelector('div.chart[data-key=\"reward/mean\"]')?.dataset.points || 0)"
            # Record every point count the chart shows, in this one document (no reload).
            page.evaluate(f"() => {{ window.__seen = [({points})()]; setInterval(() => {{ const n = ({points})(); "
                          "if (n !== window.__seen.at(-1)) window.__seen.push(n); }, 20); }")
            expect(page.locator("#run-state")).to_have_text("succeeded", timeout=150_000)
            page.wait_for_function(f"({points})() === 6")
            seen = page.evaluate("() => window.__seen")
            assert seen[0] == 0 and seen[-1] == 6 and seen == sorted(seen), seen  # arrived live, only grew
            expect(page.locator("#checkpoints tbody tr")).to_have_count(2)  # steps 3 and 6
            expect(page.locator("#latest-rollouts")).to_have_attribute("data-step", "6")
            inspector = page.context.new_page()
            inspector.goto(f"{stack.url}/runs/{run.pk}/rollouts/")
            expect(inspector.locator('section.group[data-step="6"]').first).to_be_visible()
        finally:
            run.refresh_from_db()
            if run.is_active:  # never leave training running on the shared Ray head
                from policylab.experiments.services import request_cancel

                request_cancel(run)
        assert run.status == RunStatus.SUCCEEDED
