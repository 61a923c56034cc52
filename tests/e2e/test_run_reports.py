"""The run fingerprint and the resume report in a real Chromium against the real web stack (daphne + ingest),
sent by the trainer's own EventEmitter: the resume report appears on an open run page without a reload, and
compare lists what differs between two runs' environment and data. Screenshots go to var/screenshots/."""

from __future__ import annotations

import copy

import pytest

from tests.e2e.test_dashboards import make_run, shot
from tests.platform.web_stack import emitter_for, ingested, sign_in

pytestmark = pytest.mark.e2e


def test_resume_report_on_the_run_page_and_fingerprint_diff_in_compare(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from trainer.pipeline.run.resume_report import ResumeReport
    from trainer.telemetry.fingerprint import data_source, fingerprint

    first, second = make_run(web_user, "baseline"), make_run(web_user, "new torch")
    mine = fingerprint({"seed": 1}, {"train": data_source(None, None, {"task": "countdown", "num_prompts": 64})})
    theirs = copy.deepcopy(mine)
    theirs["packages"]["torch"] = "9.9.9"
    theirs["data"]["train"] = data_source(None, None, {"task": "countdown", "num_prompts": 128})
    one, two = emitter_for(first, tracking_stack, attempt=2), emitter_for(second, tracking_stack)
    one.fingerprint(mine, 0)
    two.fingerprint(theirs, 0)
    ingested(second, two.seq, timeout=30)
    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{first.pk}/")
    expect(page.locator("#live-state")).not_to_have_text("connecting…")
    records = page.locator("#attempt-records")
    expect(records.locator(".fingerprint-packages")).to_contain_text(f"torch {mine['packages']['torch']}")
    expect(records.locator(".resume-report")).to_have_count(0)
    report = ResumeReport(asked="latest", checkpoint=str(first.run_dir / "checkpoints" / "step_2"), step=2,
                          data={"epoch": 0, "index": 8, "position": 8, "next_batch": 3, "ledger_position": 8},
                          ledger={"prompts_drawn": 8, "prompts_trained": 8, "prompts_in_flight": 0, "lost": 0,
                                  "duplicated": 0},
                          optimizer={"actor_train": {"optimizer_step": 8, "scheduler_step": 8}})
    one.resume(report.to_dict(), 2)  # live: the open page takes the section in without a reload
    resume = page.locator("#attempt-records .resume-report")
    expect(resume).to_contain_text("adds up")
    expect(resume).to_contain_text("checkpoints/step_2")
    expect(resume.locator(".resume-ledger")).to_contain_text("drawn 8 · trained 8 · in_flight 0 · lost 0 · duplicated 0")
    expect(resume).to_contain_text("actor_train: optimizer step 8, scheduler step 8")
    shot(page, "run-resume-report")
    page.goto(f"{tracking_stack.url}/compare/?runs={first.pk},{second.pk}")
    diff = page.locator("#environment-diff")
    expect(diff.locator("tr", has_text="packages.torch")).to_contain_text("9.9.9")
    expect(diff.locator("tr", has_text="data.train.synthetic.num_prompts")).to_contain_text("128")
    expect(diff).not_to_contain_text("packages.transformers")  # the same in both: not listed
    shot(page, "compare-environment-diff")
    for emitter in (one, two):
        emitter.close()
