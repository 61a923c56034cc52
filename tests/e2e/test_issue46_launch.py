"""Issue 46 items 5-7 in a real Chromium: LoRA on actor_train alone launches from the experiment page (5); the
shipped verl example saves from the editor as it is, and the editor's "Would stop the launch" heading sits only over
what does stop it (6); a refused launch is a POST-redirect-GET, the run page lists checkpoints newest first as the
CLI does, and the fork confirmation reads as a sentence (7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"
VERL = REPO_ROOT / "examples" / "foreign" / "verl_grpo_gsm8k.yaml"


@pytest.fixture
def queued() -> Iterator[list[int]]:
    """The runs the page queued, instead of handing them to Celery: running them is test_run_control's."""
    from policylab.experiments.signals import run_queued

    ids: list[int] = []

    def record(sender, *, run_id: int, **_) -> None:
        ids.append(run_id)

    run_queued.disconnect(dispatch_uid="jobs.supervise_queued_run")
    run_queued.connect(record, dispatch_uid="e2e.queued")
    try:
        yield ids
    finally:
        run_queued.disconnect(dispatch_uid="e2e.queued")
        from policylab.jobs.receivers import supervise_queued_run

        run_queued.connect(supervise_queued_run, dispatch_uid="jobs.supervise_queued_run")


def test_lora_on_actor_train_alone_launches_from_the_experiment_page(signed_in, live_server, web_user, queued) -> None:
    """Item 5: the stored config lists actor_infer's LoRA knobs at their defaults; LoRA set on actor_train alone was
    refused with "repeat actor_train's value or remove it" about them."""
    from playwright.sync_api import expect

    from policylab.experiments import services
    from policylab.experiments.models import Run

    experiment = services.create_experiment(web_user.project, "lora", DEMO.read_text(), user=web_user.user)
    page = signed_in
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.click("#launch-form summary")
    page.fill("#launch-form textarea[name=overrides]", "actor_train.model_args.lora_target=all\n"
              "actor_train.model_args.lora_rank=16\nactor_train.model_args.lora_alpha=32\n"
              "actor_train.model_args.lora_dropout=0.05")
    page.click("#launch")
    page.wait_for_url(f"{live_server.url}/runs/*/")
    expect(page.locator("#launch-errors")).to_have_count(0)
    [run] = Run.objects.all()
    assert queued == [run.pk] and "actor_train.model_args.lora_rank=16" in run.overrides


def test_a_refused_launch_redirects_so_a_reload_does_not_resubmit(signed_in, live_server, web_user) -> None:
    from playwright.sync_api import expect

    from policylab.experiments import services
    from policylab.experiments.models import Run

    experiment = services.create_experiment(web_user.project, "refused", DEMO.read_text(), user=web_user.user)
    page = signed_in
    detail = f"{live_server.url}/experiments/{experiment.pk}/"
    page.goto(detail)
    page.click("#launch-form summary")
    typed = "max_steps=0"
    page.fill("#launch-form textarea[name=overrides]", typed)
    page.click("#launch")
    expect(page.locator("#launch-errors")).to_contain_text("max_steps:")
    expect(page.locator("#launch-form textarea[name=overrides]")).to_have_value(typed)
    assert page.url == f"{detail}#launch-form"  # was .../launch/: a reload offered to resubmit the POST
    assert page.evaluate("performance.getEntriesByType('navigation')[0].type") == "navigate"
    page.reload()
    expect(page.locator("#launch-form")).to_be_visible()
    expect(page.locator("#launch-errors")).to_have_count(0)  # a plain GET: nothing resubmitted, nothing kept
    assert not Run.objects.exists()


def test_the_shipped_verl_example_saves_and_launches_from_the_editor_as_it_is(
        signed_in, live_server, web_user, queued) -> None:
    """Item 6: its data paths were outside the folders runs may read (saving refused); and "Would stop the launch"
    sat over the machine check's findings, which do not stop it (the launch went ahead, the run failed later)."""
    import re

    from playwright.sync_api import expect

    from policylab.experiments.models import Experiment, Run

    page = signed_in
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    expect(page.locator("#check-state")).to_have_text("valid")
    page.fill("#exp-name", "verl as shipped")
    page.click("[data-tab=yaml]")
    expect(page.locator("#config-yaml")).to_be_visible()  # the tab has taken the form's YAML
    page.set_input_files("#config-file", str(VERL))
    expect(page.locator("#source-format-detected")).to_have_text("verl")
    expect(page.locator("#check-state")).to_contain_text("valid")  # no error: the shipped data is readable
    expect(page.locator("#all-errors li")).to_have_count(0)
    expect(page.locator("#preflight-findings")).to_contain_text("needs 8 CUDA device(s)")
    expect(page.locator("#preflight-heading")).to_contain_text("Would fail the run once it starts")
    expect(page.locator("#errors-heading")).to_be_hidden()
    expect(page.locator("text=Would stop the launch >> visible=true")).to_have_count(0)  # over nothing that does not

    page.click("#save")
    page.wait_for_url(re.compile(r"/experiments/\d+/$"))
    experiment = Experiment.objects.get(name="verl as shipped")
    assert experiment.source_format == "verl" and experiment.config["exp_name"] == "qwen2.5_3b_grpo"
    assert experiment.config["actor_train"]["data_args"]["file_name"] == "examples/data/gsm8k/train.parquet"
    page.click("#launch")
    page.wait_for_url(re.compile(r"/runs/\d+/$"))
    [run] = Run.objects.filter(experiment=experiment)
    assert queued == [run.pk]

    # an error does stop the launch: that is what the heading sits over
    page.goto(f"{live_server.url}/projects/{web_user.project.pk}/experiments/new/")
    page.fill("[name=rollout_batch_size]", "0")
    expect(page.locator("#errors-heading")).to_be_visible()
    expect(page.locator("#errors-heading")).to_have_text("Would stop the launch")
    expect(page.locator("#errors-heading + #all-errors")).to_contain_text("rollout_batch_size")


def test_checkpoints_are_listed_newest_first_as_in_the_cli_and_the_fork_confirmation_reads_right(
        page, web_user, tracking_stack) -> None:
    """Item 7: the page listed checkpoints oldest first while the CLI and the API list them newest first; the fork
    confirmation read "… and a new run in it start from the checkpoint at step 4 and trains steps 5 to 12"."""
    from playwright.sync_api import expect

    from policylab.experiments.models import RunStatus
    from policylab.jobs.supervisor import Step, finish
    from tests.e2e.test_run_control import make_run
    from tests.platform.web_stack import emitter_for, ingested, off_the_browser_thread, sign_in

    run = make_run(web_user, {"exp_name": "order", "max_steps": 12}, status=RunStatus.RUNNING)
    emitter = emitter_for(run, tracking_stack, attempt=1)
    for step in (2, 4, 6):
        path = run.run_dir / "checkpoints" / f"step_{step}"
        path.mkdir(parents=True)
        emitter.status("running", step, total_steps=12, eta_s=10.0)
        emitter.checkpoint(step, str(path), 1024, ["model"])
    emitter.status("failed", 6, total_steps=12, message="RuntimeError: boom")
    emitter.close()
    ingested(run, emitter.seq)
    off_the_browser_thread(lambda: finish(run, None, Step("finish", RunStatus.FAILED, RunStatus.FAILED, "boom")))

    sign_in(page, tracking_stack, web_user.user)
    page.goto(f"{tracking_stack.url}/runs/{run.pk}/")
    expect(page.locator("#run-state")).to_have_text("failed")
    rows = page.locator("#checkpoints tbody tr")
    expect(rows).to_have_count(3)
    assert rows.evaluate_all("(trs) => trs.map((tr) => Number(tr.dataset.step))") == [6, 4, 2]  # was [2, 4, 6]

    page.click('#checkpoints tr[data-step="4"] button[data-fork]')
    page.fill("#fork-form textarea", "max_steps=12\nactor_train.training_args.learning_rate=1e-3")
    page.click("#fork-form button[type=submit]")
    expect(page.locator("#confirm-text")).to_have_text(
        f"A new experiment (run {run.pk}'s config with 2 overrides) and a new run in it start from the checkpoint at "
        f"step 4. The new run trains steps 5 to 12. Run {run.pk} stays as it is.")
    page.click("#confirm-no")


def test_compare_shows_an_agentic_runs_environments_and_no_lone_config_hash(signed_in, live_server, web_user) -> None:
    """Item 7: compare showed `data {}` for an agentic run, and a config-hash difference as the only change between
    two demo runs. The fingerprints are the trainer's own (run_fingerprint) of the shipped examples."""
    from playwright.sync_api import expect

    from policylab.tracking.ingest import ingest_events
    from tests.e2e.test_dashboards import make_run
    from tests.platform.tracking.conftest import event
    from trainer.config import load_config
    from trainer.pipeline.runner import run_fingerprint

    demo = run_fingerprint(load_config(DEMO))
    agentic = run_fingerprint(load_config(REPO_ROOT / "examples" / "agentic_grid_cpu.yaml"))
    runs = [make_run(web_user, name) for name in ("demo a", "demo b", "agentic")]
    for run, found in zip(runs, (demo, demo | {"config_hash": "f" * 64}, agentic), strict=True):
        ingest_events([event("fingerprint", run.pk, 1, 0, found)], publish=False)

    page = signed_in
    page.goto(f"{live_server.url}/compare/?runs={runs[0].pk},{runs[1].pk}")
    summary = page.locator("#environment-diff-details summary")
    expect(summary).to_contain_text("Same packages, hardware, config hash and data")  # was "1 fact differs: config_hash"
    expect(page.locator("#environment-diff")).to_have_count(0)

    page.goto(f"{live_server.url}/compare/?runs={runs[0].pk},{runs[2].pk}")
    page.click("#environment-diff-details summary")
    table = page.locator("#environment-diff")
    expect(table).to_be_visible()
    tag = load_config(REPO_ROOT / "examples" / "agentic_grid_cpu.yaml").train_env_manager.tags[0]
    expect(table).to_contain_text(f"data.train.environments.{tag}.env_type")
    expect(table).to_contain_text("data.train.synthetic.task")
    cells = table.locator("td code").all_inner_texts()
    assert "{}" not in cells and "data" not in cells  # was a row "data  {}"
