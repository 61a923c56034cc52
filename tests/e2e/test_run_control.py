"""Run control in a real Chromium against the real web stack (daphne + ingest): cancel from the run page,
a header that never goes back to an older state or step, and checkpoints that retention pruned.

The first test launches a real run (Celery supervises a Ray job running the trainer); the others drive
the trainer's own EventEmitter from the test, which owns the timing (late and replayed events).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.platform.web_stack import (
    CELERY_CHANNELS_PREFIX,
    emitter_for,
    ingested,
    off_the_browser_thread,
    sign_in,
    start_tracking_stack,
)

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
# The lifecycle order (docs/decisions/0009): a page may only ever move right along it.
LIFECYCLE = ["queued", "submitting", "starting", "running", "cancelling", "succeeded", "failed", "cancelled"]
# Every change of the header, as [status, step] pairs, recorded in the page itself.
RECORD_HEADER = """() => {
  window.__seen = [];
  const note = () => {
    const entry = [document.getElementById("run-state").textContent, Number(document.getElementById("run-step").textContent)];
    const last = window.__seen.at(-1);
    if (!last || last[0] !== entry[0] || last[1] !== entry[1]) window.__seen.push(entry);
  };
  note();
  new MutationObserver(note).observe(document.getElementById("run"), { subtree: true, childList: true, characterData: true, attributes: true });
}"""





def make_run(web_user, config: dict, **fields):
    from policylab.experiments.models import Experiment, Run

    experiment = Experiment.objects.create(
        project=web_user.project, name=f"e2e {uuid.uuid4().hex[:6]}", config=config,
        config_yaml="", config_hash=uuid.uuid4().hex,
    )
    return Run.objects.create(experiment=experiment, created_by=web_user.user, **fields)


def test_launch_then_cancel_from_the_run_page_ends_cancelled_and_stays_so(
    page, web_user, live_celery, settings, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from policylab.experiments import services
    from policylab.experiments.models import Run
    from policylab.jobs import ray_jobs

    demo = (REPO_ROOT / "examples" / "demo_grpo_cpu.yaml").read_text()
    experiment = services.create_experiment(web_user.project, "to cancel", demo, user=web_user.user)
    runs_dir = Path(live_celery.env["POLICYLAB_RUNS_DIR"])
    settings.POLICYLAB_RUNS_DIR = runs_dir
    with start_tracking_stack(live_celery.env["REDIS_URL"], runs_dir, tmp_path, CELERY_CHANNELS_PREFIX) as stack:
        sign_in(page, stack, web_user.user)
        page.goto(f"{stack.url}/experiments/{experiment.pk}/")
        page.click("#launch-form summary")
        page.fill("#launch-form textarea[name=overrides]", "max_steps=100000\nsave_steps=100000")
        page.click("#launch")
        page.wait_for_url(f"{stack.url}/runs/*/")
        run = Run.objects.get(experiment=experiment)
        try:
            expect(page.locator("#live-state")).to_have_text("live")
            page.evaluate(RECORD_HEADER)
            page.evaluate("""() => { window.__messages = new Set(); new MutationObserver(() =>
                window.__messages.add(document.getElementById("run-message").textContent)).observe(
                document.getElementById("run-message"), { subtree: true, childList: true, characterData: true }); }""")
            expect(page.locator("#run-state")).to_have_text("running", timeout=150_000)
            phases = page.evaluate("() => [...window.__messages]")
            assert "first rollout" in phases and any(p.startswith("loading model") for p in phases), phases

            expect(page.locator("#cancel-run")).to_be_visible()
            page.click("#cancel-run")
            expect(page.locator("#confirm-text")).to_contain_text("finishes as cancelled")
            page.click("#confirm-yes")
            expect(page.locator("#run-state")).to_have_text("cancelled", timeout=60_000)
            expect(page.locator("#cancel-run")).to_be_hidden()
            expect(page.locator("#run-message")).to_have_text("cancelled by user")

            # The trainer killed by the cancel may still report (as a Ray-side SIGTERM handler makes it do):
            late = emitter_for(run, stack, attempt=1)
            late.status("failed", 3, total_steps=100000, message="SystemExit: 15")
            late.close()
            ingested(run, late.seq)
            page.wait_for_timeout(1000)  # room for any frame to arrive
            expect(page.locator("#run-state")).to_have_text("cancelled")
            seen = [state for state, _ in page.evaluate("() => window.__seen")]
            page.reload()
            expect(page.locator("#live-state")).to_have_text("live")
            expect(page.locator("#run-state")).to_have_text("cancelled")
        finally:
            run.refresh_from_db()
            if run.is_active:  # never leave training running on the shared Ray head
                from policylab.experiments.services import request_cancel

                request_cancel(run)
    run.refresh_from_db()
    assert (run.status, run.message) == ("cancelled", "cancelled by user")
    assert list(run.attempts.values_list("number", "status")) == [(1, "cancelled")]  # nothing retried
    job_id = run.attempts.get(number=1).ray_job_id
    assert ray_jobs.job_state(ray_jobs.connect(live_celery.env["RAY_ADDRESS"]), job_id).status == "STOPPED"
    assert seen == sorted(seen, key=LIFECYCLE.index) and seen[-1] == "cancelled", seen


def test_late_and_replayed_events_never_move_the_page_backwards(page, web_user, tracking_stack) -> None:
    """Attempt 1 keeps reporting after attempt 2 took over, the run's events.jsonl is replayed into
    ingest (`manage.py import_events`), a `running` that lagged behind arrives after the supervisor
    recorded success, and the page reconnects: the header only ever moves forward, and ends at
    succeeded, step 8 of 8."""
    from django.core.management import call_command
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus
    from policylab.jobs.supervisor import Step, finish

    run = make_run(web_user, {"exp_name": "late", "max_steps": 8}, status=RunStatus.SUBMITTING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.FAILED)
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.RUNNING)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate(RECORD_HEADER)

    def train(emitter, steps) -> None:
        for step in steps:
            emitter.metrics({"reward/mean": step / 10}, step)
            emitter.status("running", step, total_steps=8, eta_s=(8 - step) * 3.0)

    current = emitter_for(run, tracking_stack, attempt=2)
    current.status("starting", 0, total_steps=8, message="first rollout")
    train(current, range(1, 6))
    current.close()
    expect(page.locator("#run-step")).to_have_text("5")

    stale = emitter_for(run, tracking_stack, attempt=1)  # the old attempt's process, still reporting
    stale.status("running", 2, total_steps=8, eta_s=60.0)
    stale.status("failed", 2, total_steps=8, message="SystemExit: 15")
    stale.close()
    ingested(run, stale.seq)
    events_file = str(run.run_dir / "events.jsonl")
    off_the_browser_thread(lambda: call_command("import_events", str(run.pk), events_file))  # a replay
    current = emitter_for(run, tracking_stack, attempt=2)
    train(current, (6, 7, 8))
    current.status("succeeded", 8, total_steps=8, eta_s=0.0)
    ingested(run, current.seq)
    off_the_browser_thread(lambda: finish(run, None, Step("finish", RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, "")))
    expect(page.locator("#run-state")).to_have_text("succeeded")
    current.status("running", 6, total_steps=8, eta_s=24.0)  # a report that lagged behind the end
    current.close()
    ingested(run, current.seq)

    page.evaluate("() => window.policylab.live.close()")  # the socket drops; the page replays what it missed
    expect(page.locator("#live-state")).to_have_text("live")
    page.wait_for_timeout(1000)
    expect(page.locator("#run-state")).to_have_text("succeeded")
    expect(page.locator("#run-step")).to_have_text("8")
    expect(page.locator("#run-eta")).to_have_text("—")
    seen = page.evaluate("() => window.__seen")
    states, steps = [s for s, _ in seen], [n for _, n in seen]
    assert "failed" not in states, seen
    assert states == sorted(states, key=LIFECYCLE.index), seen
    assert steps == sorted(steps), seen
    assert seen[-1] == ["succeeded", 8], seen


def test_a_checkpoint_saved_while_the_page_is_open_joins_the_table_and_retires_the_pruned_one(
        page, web_user, tracking_stack) -> None:
    """Issue 42: a live checkpoint frame is the API's dict of its row (selectors.checkpoint_dict); the page adds it
    and takes the table from the API, which marks the checkpoint the save pruned (max_ckpts_to_keep=2)."""
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus

    run = make_run(web_user, {"exp_name": "live-ck", "max_steps": 12, "max_ckpts_to_keep": 2}, status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack, attempt=1)
    folders = {step: run.run_dir / "checkpoints" / f"step_{step}" for step in (2, 4, 6)}
    for step in (2, 4):
        folders[step].mkdir(parents=True)
        emitter.status("running", step, total_steps=12, eta_s=10.0)
        emitter.checkpoint(step, str(folders[step]), 1024, ["model"])
    ingested(run, emitter.seq)

    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    rows = page.locator("#checkpoints tbody tr")
    expect(rows).to_have_count(2)
    folders[6].mkdir(parents=True)
    folders[2].rmdir()  # the trainer's retention, before it reports the save
    emitter.status("running", 6, total_steps=12, eta_s=10.0)
    emitter.checkpoint(6, str(folders[6]), 2048, ["model"])
    emitter.close()
    expect(rows).to_have_count(3)
    expect(page.locator('#checkpoints tr[data-step="6"] .checkpoint-state')).to_have_text("on disk")
    expect(page.locator('#checkpoints tr[data-step="2"] .checkpoint-state')).to_have_text("deleted by retention")


def test_a_checkpoint_pruned_by_retention_is_shown_deleted_and_not_resumable(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus
    from policylab.jobs.supervisor import Step, finish
    from policylab.tracking.models import Checkpoint

    run = make_run(web_user, {"exp_name": "kept", "max_steps": 12, "max_ckpts_to_keep": 2}, status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack, attempt=1)
    saved = []
    for step in (2, 4, 6):  # what the trainer does: save, prune beyond the newest two, report the save
        path = run.run_dir / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)
        saved.append(path)
        if len(saved) > 2:
            saved.pop(0).rmdir()
        emitter.status("running", step, total_steps=12, eta_s=10.0)
        emitter.checkpoint(step, str(path), 1024, ["model"])
    emitter.status("failed", 6, total_steps=12, message="RuntimeError: boom")
    emitter.close()
    ingested(run, emitter.seq)
    off_the_browser_thread(lambda: finish(run, None, Step("finish", RunStatus.FAILED, RunStatus.FAILED,
                                                           "RuntimeError: boom")))

    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-state")).to_have_text("failed")
    expect(page.locator("#run-message")).to_have_text("RuntimeError: boom")
    expect(page.locator("#full-log")).to_have_attribute("href", f"/runs/{run.pk}/log/")
    rows = page.locator("#checkpoints tbody tr")
    expect(rows).to_have_count(3)
    pruned = page.locator('#checkpoints tr[data-step="2"]')
    expect(pruned.locator(".checkpoint-state")).to_have_text("deleted by retention")
    expect(pruned.locator("button")).to_have_count(0)
    expect(page.locator('#checkpoints tr[data-step="4"] button[data-resume]')).to_be_visible()

    # Resume asks first, saying what will happen; declining changes nothing.
    page.click('#checkpoints tr[data-step="4"] button[data-resume]')
    expect(page.locator("#confirm-text")).to_contain_text(f"A new run starts from run {run.pk}'s checkpoint at step 4")
    page.click("#confirm-no")
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.child_runs.count() == 0

    # The API refuses the pruned checkpoint by name, as the page never offers it.
    pruned_id = Checkpoint.objects.get(run=run, step=2).pk
    answer = page.evaluate("""async ([url, id]) => {
        const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] || "";
        const r = await fetch(url, { method: "POST", credentials: "same-origin",
          headers: { "Content-Type": "application/json", "X-CSRFToken": csrf }, body: JSON.stringify({ checkpoint: id }) });
        return [r.status, await r.json()];
    }""", [f"/api/runs/{run.pk}/resume/", pruned_id])
    assert answer[0] == 400, answer
    assert f"checkpoint {pruned_id} (step 2)" in json.dumps(answer[1]) and "deleted by retention" in json.dumps(answer[1])

    # A checkpoint removed by hand is found gone from disk on the next look.
    saved[0].rmdir()  # step 4
    page.reload()
    expect(page.locator('#checkpoints tr[data-step="4"] .checkpoint-state')).to_have_text("gone from disk")
    expect(page.locator('#checkpoints tr[data-step="4"] button')).to_have_count(0)
    expect(page.locator('#checkpoints tr[data-step="6"] button[data-resume]')).to_be_visible()
