"""Issue 35 in a real Chromium, one test per item: a finished run's final checkpoint offers Fork, not Resume,
as the CLI says too (2); a refused launch keeps the overrides and says why beside them (3); an untouched
editor form shows no warnings (4); the editor's check reports the launch's preflight (6); a resumed attempt's
step never shows below its checkpoint's (8); History downloads its table as CSV (9)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_run_control import RECORD_HEADER, make_run
from tests.platform.web_stack import emitter_for, ingested, off_the_browser_thread, sign_in

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"
VERL = REPO_ROOT / "examples" / "foreign" / "verl_grpo_gsm8k.yaml"
REFUSED = 5  # the CLI's exit code for a request the server refused (client/policylab_client/cli.py)


def policylab(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The `policylab` CLI of this tree (client/), with a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLICYLAB_")}
    env |= {"HOME": str(home), "POLICYLAB_CONFIG": str(home / "policylab.json"), "PYTHONPATH": str(REPO_ROOT / "client")}
    return subprocess.run([sys.executable, "-m", "policylab_client", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_a_finished_runs_final_checkpoint_offers_fork_not_resume_on_the_page_and_in_the_cli(
    page, web_user, tracking_stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from policylab.accounts.services import create_api_token
    from policylab.experiments.models import Experiment, Run, RunStatus
    from policylab.jobs.supervisor import Step, finish
    from trainer.config import validate_config

    demo = validate_config(DEMO.read_text()).config.model_dump(mode="json")
    run = make_run(web_user, demo, status=RunStatus.RUNNING, overrides=["max_steps=6"])
    emitter = emitter_for(run, tracking_stack)
    for step in (3, 6):
        path = run.run_dir / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)
        emitter.status("running", step, total_steps=6)
        emitter.checkpoint(step, str(path), 1024, ["model"])
    emitter.status("succeeded", 6, total_steps=6)
    emitter.close()
    ingested(run, emitter.seq)
    off_the_browser_thread(lambda: finish(run, None, Step("finish", RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, "")))

    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-state")).to_have_text("succeeded")
    final = page.locator('#checkpoints tr[data-step="6"]')
    expect(final.locator("button[data-fork]")).to_be_visible()
    expect(final.locator("button[data-resume]")).to_have_count(0)  # it would train steps 7 to 6
    expect(final).to_contain_text("already finished all its 6 steps")
    expect(page.locator('#checkpoints tr[data-step="3"] button[data-resume]')).to_be_visible()

    # Fork offers a larger max_steps; a refusal is shown in the fork form, where the user is looking.
    final.locator("button[data-fork]").click()
    overrides = page.locator("#fork-form textarea")
    expect(overrides).to_have_value("max_steps=12")
    overrides.fill("max_steps=6")
    page.click("#fork-form button[type=submit]")
    page.click("#confirm-yes")
    refusal = page.locator("#fork-errors")
    expect(refusal).to_contain_text("max_steps: 6: the fork starts at step 6 and would train nothing")
    expect(refusal).to_be_in_viewport()
    expect(page.locator("#action-error")).to_have_text("")
    assert Run.objects.count() == 1 and Experiment.objects.count() == 1

    # The CLI lists the same verdicts, and resume refuses exactly what it does not call resumable.
    home = tmp_path / "home"
    token = ["--url", tracking_stack.url, "--token", create_api_token(web_user.user, web_user.team, "cli").secret]
    listed = policylab(home, *token, "checkpoints", str(run.pk))
    assert listed.returncode == 0, listed.stderr
    states = {line.split()[1]: line for line in listed.stdout.splitlines()[1:] if line.split()[0].isdigit()}
    assert "fork only" in states["6"] and "resumable" in states["3"], listed.stdout
    assert "already finished all its 6 steps" in listed.stdout and "max_steps=12" in listed.stdout
    resumed = policylab(home, *token, "resume", str(run.pk))
    assert resumed.returncode == REFUSED and "already finished all its 6 steps" in resumed.stderr


def test_a_refused_launch_keeps_the_overrides_and_shows_why_beside_them(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments import services
    from policylab.experiments.models import Run

    experiment = services.create_experiment(web_user.project, "to launch", DEMO.read_text(), user=web_user.user)
    page = signed_in
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.click("#launch-form summary")
    typed = "max_steps=0\nrollout_batch_sise=8"
    page.fill("#launch-form textarea[name=overrides]", typed)
    page.click("#launch")
    errors = page.locator("#launch-form #launch-errors")
    expect(errors).to_contain_text("max_steps:")
    expect(errors).to_contain_text("rollout_batch_sise")
    expect(page.locator("#launch-form details")).to_have_attribute("open", "")
    expect(page.locator("#launch-form textarea[name=overrides]")).to_have_value(typed)
    expect(page.locator(".messages")).to_have_count(0)  # nothing at the top of the page
    box, area = errors.bounding_box(), page.locator("#launch-form textarea").bounding_box()
    assert 0 <= box["y"] - (area["y"] + area["height"]) < 100  # right under what caused it
    assert not Run.objects.exists()


def test_a_fresh_form_warns_about_nothing_and_a_field_the_user_sets_is_named(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    expect(page.locator("#check-state")).to_have_text("valid")
    expect(page.locator("#derived")).to_contain_text("actor_train.optimizer_steps_per_rollout")  # checked
    expect(page.locator("#all-warnings li")).to_have_count(0)
    page.click("[data-tab=form][data-view=full]")
    page.fill("[name=max_staleness]", "2")
    warnings = page.locator("#all-warnings li")
    expect(warnings).to_have_count(1)
    expect(warnings).to_contain_text("max_staleness has no effect in sync rollout")


def test_the_editor_check_of_the_shipped_verl_example_reports_the_preflight(
    signed_in, live_server, web_user, settings
) -> None:
    from playwright.sync_api import expect

    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    expect(page.locator("#check-state")).to_have_text("valid")
    page.click("[data-tab=yaml]")
    page.set_input_files("#config-file", str(VERL))
    expect(page.locator("#source-format-detected")).to_have_text("verl")
    findings = page.locator("#preflight-findings")
    expect(findings).to_be_visible()
    expect(findings).to_contain_text("actor_infer.device_mapping vllm needs 8 CUDA device(s)")
    expect(findings).to_contain_text("actor_train.model_args.model_name_or_path 'Qwen/Qwen2.5-3B-Instruct' is neither")
    expect(page.locator("#preflight-where")).to_contain_text("the machine that runs the job may differ")
    expect(page.locator("#check-state")).to_contain_text("valid, but")
    expect(page.locator("#check-state")).to_contain_text("machine-check finding")


def test_a_resumed_attempts_step_never_shows_below_its_checkpoint(page, web_user, tracking_stack) -> None:
    from playwright.sync_api import expect

    from policylab.experiments.models import RunAttempt, RunStatus

    run = make_run(web_user, {"exp_name": "resumed", "max_steps": 400}, status=RunStatus.RUNNING)
    RunAttempt.objects.create(run=run, number=1, status=RunStatus.RUNNING)
    first = emitter_for(run, tracking_stack, attempt=1)
    path = run.run_dir / "checkpoints" / "step_82"
    path.mkdir(parents=True)
    first.status("running", 82, total_steps=400)
    first.checkpoint(82, str(path), 1024, ["model"])
    first.status("running", 101, total_steps=400)
    first.close()
    ingested(run, first.seq)
    RunAttempt.objects.filter(run=run, number=1).update(status=RunStatus.FAILED)  # the supervisor retries
    RunAttempt.objects.create(run=run, number=2, status=RunStatus.SUBMITTING)

    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#run-step")).to_have_text("101")
    page.evaluate(RECORD_HEADER)
    second = emitter_for(run, tracking_stack, attempt=2)
    second.status("starting", 0, total_steps=400, message="loading checkpoint")  # before it has loaded step 82
    ingested(run, second.seq)
    expect(page.locator("#run-message")).to_have_text("loading checkpoint")
    expect(page.locator("#run-step")).to_have_text("82")
    assert page.evaluate("() => document.getElementById('run-progress').style.width") == f"{100 * 82 / 400}%"
    second.status("running", 83, total_steps=400)
    second.close()
    ingested(run, second.seq)
    expect(page.locator("#run-step")).to_have_text("83")
    steps = [step for _, step in page.evaluate("() => window.__seen")]
    assert min(steps) >= 82, steps


def test_history_downloads_its_table_as_csv_with_the_metric_columns(signed_in, live_server, web_user) -> None:
    from policylab.experiments.models import Experiment, Run, RunStatus
    from policylab.tracking.ingest import ingest_events
    from tests.platform.tracking.conftest import event

    for name, status, rewards in (("low lr", RunStatus.SUCCEEDED, [0.1, 0.3, 0.2]),
                                  ("high lr", RunStatus.SUCCEEDED, [0.4, 0.123456789]),
                                  ("broken", RunStatus.FAILED, [0.9])):
        experiment = Experiment.objects.create(project=web_user.project, name=name, config={"max_steps": 3},
                                               config_yaml="", config_hash=uuid.uuid4().hex)
        run = Run.objects.create(experiment=experiment, created_by=web_user.user, status=status, current_step=3)
        ingest_events([event("metrics", run.pk, step, step, {"values": {"reward/mean": value, "actor/kl": value / 10}})
                       for step, value in enumerate(rewards, start=1)], run_id=run.pk, publish=False)
    page = signed_in
    page.goto(f"{live_server.url}/history/?status=succeeded&metrics=reward/mean,actor/kl:min&sort=-m0.best")
    with page.expect_download() as download:
        page.click("#history-csv")
    header, *rows = list(csv.reader(Path(download.value.path()).read_text(encoding="utf-8").splitlines()))
    assert header == ["run", "experiment", "status", "step", "total_steps", "duration_s", "created", "project", "tags",
                      "reward/mean (last)", "reward/mean (max)", "actor/kl (last)", "actor/kl (min)"]
    table = page.evaluate("""() => [...document.querySelectorAll("#history tbody tr")].map((tr) => [
        tr.dataset.run, ...[...tr.querySelectorAll("td")].slice(2, 4).map((td) => td.textContent.trim()),
        ...[...tr.querySelectorAll("td.metric")].map((td) => td.title)])""")
    assert [[r[0], r[1], r[2], *r[9:]] for r in rows] == table
    assert [r[1] for r in rows] == ["high lr", "low lr"]  # the filter and the sort, as on the page
    assert rows[0][9:] == ["0.123456789", "0.4", "0.0123456789", "0.0123456789"]  # exact, where the table rounds
