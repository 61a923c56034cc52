"""Issue 35, items 3, 4 and 6: the editor warns only about fields the user set (as `python -m trainer validate`
does for a file), its check runs the launch's preflight, and a refused launch keeps what the user typed."""

from __future__ import annotations

import io
import re
from html import unescape
from pathlib import Path

import pytest

from policylab.experiments.models import Project, Run
from tests.platform.experiments.test_pages import form_fields
from trainer.cli import run_validate
from trainer.config.preflight import installed

pytestmark = pytest.mark.django_db
REPO_ROOT = Path(__file__).resolve().parents[3]
DEMO = REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"
VERL = REPO_ROOT / "examples" / "foreign" / "verl_grpo_gsm8k.yaml"


@pytest.fixture
def fresh_form(browser, team_a) -> dict[str, str]:
    """What the browser submits for the editor's untouched starting form (the demo config)."""
    project = Project.objects.create(team=team_a, name="proj")
    return form_fields(browser.get(f"/projects/{project.pk}/experiments/new/").content.decode()) | {"editor_mode": "form"}


def cli_validate(config: Path, *overrides: str, preflight: bool = False) -> tuple[int, str]:
    """`python -m trainer validate CONFIG [overrides] [--preflight]` (in this process): exit code and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code = run_validate(str(config), list(overrides), out=out, err=err, preflight=preflight)
    return code, err.getvalue()


def test_an_untouched_form_warns_about_nothing_as_the_cli_says_of_its_file(browser, fresh_form) -> None:
    code, said = cli_validate(DEMO)
    assert code == 0 and "warning" not in said, said  # the CLI: none
    payload = browser.post("/editor/check/", fresh_form).json()
    assert payload["ok"] and payload["warnings"] == []
    # a knob the user sets that has no effect in sync rollout is named, as the CLI names it in a file
    payload = browser.post("/editor/check/", fresh_form | {"max_staleness": "2"}).json()
    assert payload["ok"] and [w["field"] for w in payload["warnings"]] == ["max_staleness"]
    assert "has no effect in sync rollout" in payload["warnings"][0]["message"]
    code, said = cli_validate(DEMO, "max_staleness=2")
    assert "max_staleness: warning: has no effect in sync rollout" in said, said


def test_the_editor_check_runs_the_launchs_preflight(browser, fresh_form, settings) -> None:
    """The shipped verl example, valid on the default deployment as it is (its data ships in examples/data, its
    model is a hub id; issue 46): the check names what the trainer's preflight (`validate --preflight`, what
    `trainer run` runs first) names on this machine, as warnings, before anything is saved or launched."""
    payload = browser.post("/editor/check/", {"editor_mode": "yaml", "config_yaml": VERL.read_text()}).json()
    assert payload["ok"], payload["errors"]
    code, said = cli_validate(VERL, preflight=True)
    assert code == 2 and "cannot run on this machine (preflight" in said, said
    findings = said.split("(preflight", 1)[1].splitlines()[1:]  # "field: message", one a line
    expected = [line.split(": ", 1)[0] for line in findings if line.strip()]
    assert expected and [f["field"] for f in payload["preflight"]] == expected
    assert "may differ" in payload["preflight_where"]
    by_field = {f["field"]: f["message"] for f in payload["preflight"]}
    assert "needs 8 CUDA device(s)" in by_field["actor_infer.device_mapping"]
    assert "actor_train.data_args.file_name" not in by_field  # the shipped sample is there
    assert "neither a folder here nor in the local HF cache" in by_field["actor_train.model_args.model_name_or_path"]
    if not installed("wandb"):
        assert "package 'wandb' is not installed" in by_field["track_with"]
    assert not [w for w in payload["warnings"] if w["field"] in by_field]  # not mixed into the config's warnings
    # the starting demo config passes the same check
    assert browser.post("/editor/check/", fresh_form).json()["preflight"] == []


def test_a_refused_launch_keeps_the_overrides_and_says_why_at_the_form(browser, alice, team_a, make_experiment) -> None:
    experiment = make_experiment(alice, team_a)
    typed = "max_steps=0\nrollout_batch_sise=8"
    answer = browser.post(f"/experiments/{experiment.pk}/launch/", {"overrides": typed}, follow=True)
    html = answer.content.decode()
    # POST-redirect-GET (issue 46): the page is a GET, so a reload does not offer to resubmit the launch
    assert answer.redirect_chain == [(f"/experiments/{experiment.pk}/#launch-form", 302)]
    assert answer.status_code == 200 and not Run.objects.exists()
    form = re.search(r'<form [^>]*id="launch-form".*?</form>', html, flags=re.S).group(0)
    assert re.search(r"<details open>", form)  # the Overrides section stays open
    assert unescape(re.search(r'<textarea name="overrides"[^>]*>(.*?)</textarea>', form, flags=re.S).group(1)) == typed
    errors = re.search(r'<div id="launch-errors".*?</div>', form, flags=re.S).group(0)
    assert "max_steps: " in errors and "rollout_batch_sise" in errors and "rollout_batch_size" in errors
    assert 'class="messages"' not in html  # no banner at the top of the page
    again = browser.get(f"/experiments/{experiment.pk}/").content.decode()  # shown once, not on every visit
    assert 'id="launch-errors"' not in again and "rollout_batch_sise" not in again
