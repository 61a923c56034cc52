"""Server-rendered pages: sign-in, lists, the config editor (valid, invalid, YAML, import), launch."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client

from policylab.experiments.models import Experiment, Project, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(team_a) -> Project:
    return Project.objects.create(team=team_a, name="proj")


def form_fields(html: str) -> dict[str, str]:
    """The editor's inputs as a browser would submit them (checked boxes, selected options)."""
    post: dict[str, str] = {}
    for tag in re.findall(r"<input [^>]*>", html):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or 'type="file"' in tag:
            continue
        if 'type="checkbox"' in tag:
            if " checked" in tag:
                post[name.group(1)] = "1"
            continue
        value = re.search(r'value="([^"]*)"', tag)
        post[name.group(1)] = value.group(1).replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&") if value else ""
    for name, body in re.findall(r'<select id="[^"]*" name="([^"]+)">(.*?)</select>', html, flags=re.S):
        selected = re.search(r'<option value="([^"]*)" selected', body) or re.search(r'<option value="([^"]*)"', body)
        post[name] = selected.group(1).replace("&quot;", '"')
    return post


def test_sign_in_page_and_redirect(alice):
    client = Client()
    assert client.get("/").status_code == 302
    page = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123456"})
    assert page.status_code == 302
    assert "Projects" in client.get("/").content.decode()


def test_editor_renders_the_schema_form_and_saves_a_valid_config(browser, project):
    page = browser.get(f"/projects/{project.pk}/experiments/new/")
    html = page.content.decode()
    assert 'name="actor_train.training_args.learning_rate"' in html and "<legend>Batch sizes</legend>" in html
    post = form_fields(html)
    post.update({"name": "from the form", "editor_mode": "form", "rollout_batch_size": "32"})
    response = browser.post(f"/projects/{project.pk}/experiments/new/", post)
    assert response.status_code == 302, re.findall(r'<ul id="all-errors".*?</ul>', response.content.decode(), re.S)
    experiment = Experiment.objects.get(name="from the form")
    assert experiment.config["rollout_batch_size"] == 32
    assert experiment.config["actor_train"]["training_args"]["learning_rate"] == 0.002


def test_editor_shows_errors_inline_and_saves_nothing(browser, project):
    post = form_fields(browser.get(f"/projects/{project.pk}/experiments/new/").content.decode())
    post.update({"name": "bad", "editor_mode": "form", "actor_train.training_args.learning_rate": "-1",
                 "rollout_batch_size": "lots"})
    html = browser.post(f"/projects/{project.pk}/experiments/new/", post).content.decode()
    field = re.search(r'data-errors-for="rollout_batch_size"\s*>(.*?)</ul>', html, re.S)
    assert field and "expected a whole number" in field.group(1)
    assert 'value="lots"' in html  # what the user typed stays in the input
    assert not Experiment.objects.exists()
    post["rollout_batch_size"] = "16"
    html = browser.post(f"/projects/{project.pk}/experiments/new/", post).content.decode()
    field = re.search(r'data-errors-for="actor_train.training_args.learning_rate"\s*>(.*?)</ul>', html, re.S)
    assert field and "greater than 0" in field.group(1)


VERL = {
    "data": {"train_batch_size": 8, "max_prompt_length": 64, "max_response_length": 32, "train_files": "examples/data/t.parquet"},
    "algorithm": {"adv_estimator": "grpo"},
    "actor_rollout_ref": {
        "model": {"path": "/models/m"},
        "actor": {"optim": {"lr": 3e-6}, "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 2},
        "rollout": {"n": 4, "name": "hf"},
    },
    "trainer": {"total_epochs": 1, "n_gpus_per_node": 1, "nnodes": 1},
}


def input_tag(html: str, name: str) -> str:
    return re.search(rf'<input [^>]*name="{re.escape(name)}"[^>]*>', html).group(0)


def test_yaml_tab_imports_a_foreign_format_and_fills_the_form(browser, project, demo_yaml):
    response = browser.post("/editor/check/", {"editor_mode": "yaml", "config_yaml": yaml.safe_dump(VERL), "render_form": "1"})
    body = response.json()
    assert body["source_format"] == "verl" and body["ok"], body["errors"]
    assert body["warnings"] and all(w["field"] and w["message"] for w in body["warnings"])  # the importer's notes
    assert 'value="8"' in input_tag(body["form_html"], "rollout_batch_size")
    assert 'value="3e-06"' in input_tag(body["form_html"], "actor_train.training_args.learning_rate")
    assert yaml.safe_load(body["yaml"])["actor_train"]["model_args"]["model_name_or_path"] == "/models/m"

    native = browser.post("/editor/check/", {"editor_mode": "yaml", "config_yaml": demo_yaml, "render_form": "1"}).json()
    assert native["ok"] and native["source_format"] == "roll"
    assert native["derived"]["actor_train.global_train_batch"] == 64
    assert 'value="16"' in input_tag(native["form_html"], "rollout_batch_size")

    saved = browser.post(f"/projects/{project.pk}/experiments/new/",
                         {"name": "from verl", "editor_mode": "yaml", "config_yaml": yaml.safe_dump(VERL), "source_format": "auto"})
    assert saved.status_code == 302
    experiment = Experiment.objects.get(name="from verl")
    assert experiment.source_format == "verl" and experiment.config["rollout_batch_size"] == 8
    assert yaml.safe_load(experiment.source_text) == VERL  # the file as submitted is kept next to the native snapshot


CORPUS = Path(__file__).resolve().parents[2] / "trainer" / "importers" / "corpus"


def test_pasted_verl_and_roll_files_import_without_their_sibling_configs(browser):
    """Issue 21: a verl v0.4 file relying on `defaults: [ppo_trainer, _self_]` and a ROLL main agentic file
    relying on ../config/traj_envs are pasted alone; the frameworks' own configs are built in."""
    verl = browser.post("/editor/check/", {"editor_mode": "yaml", "render_form": "1",
                                           "config_yaml": (CORPUS / "verl_v0.4_gsm8k_grpo.yaml").read_text()}).json()
    assert verl["source_format"] == "verl" and verl["ok"], verl["errors"]
    fields = {w["field"] for w in verl["warnings"]}
    assert "actor_rollout_ref.rollout.multi_turn.max_assistant_turns" in fields  # known, no effect: shown
    # mini 16 prompts × n 4 = 64 samples = micro 4 × 2 GPUs × 8 accumulation steps
    assert 'value="8"' in input_tag(verl["form_html"], "actor_train.training_args.gradient_accumulation_steps")

    roll = browser.post("/editor/check/", {"editor_mode": "yaml", "render_form": "1",
                                           "config_yaml": (CORPUS / "roll_main_agentic.yaml").read_text()}).json()
    assert roll["source_format"] == "roll" and roll["ok"], roll["errors"]
    assert "custom_envs.SimpleSokoban.agent_template" in {w["field"] for w in roll["warnings"]}
    native = yaml.safe_load(roll["yaml"])
    assert native["train_env_manager"]["env_groups"] == 8
    assert native["custom_envs"]["SimpleSokoban"]["max_steps"] == 5  # the file's helper variable


def test_experiment_page_launches_a_run(browser, alice, team_a, make_experiment, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, team_a)
    page = browser.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'id="launch"' in page and "rollout_batch_size: 16" in page
    with django_capture_on_commit_callbacks() as callbacks:
        response = browser.post(f"/experiments/{experiment.pk}/launch/", {"overrides": "max_steps=3"})
    run = Run.objects.get(experiment=experiment)
    assert response.status_code == 302 and response["Location"].rstrip("/").endswith(str(run.pk))
    assert run.overrides == ["max_steps=3"] and len(callbacks) == 1
    status = browser.get(f"/api/runs/{run.pk}/").json()
    assert status["status"] == "queued"


def test_bootstrap_demo_is_idempotent(db):
    out = StringIO()
    call_command("bootstrap_demo", stdout=out)
    call_command("bootstrap_demo", stdout=StringIO())
    assert "user: demo" in out.getvalue() and "password: demo-password" in out.getvalue()
    assert Experiment.objects.filter(name="demo_grpo_cpu").count() == 1
    assert Client().login(username="demo", password="demo-password")


def test_projects_are_created_in_your_own_teams_only(browser, team_a, team_b, victor):
    assert browser.post("/projects/new/", {"name": "p1", "team": team_a.pk}).status_code == 302
    assert Project.objects.filter(team=team_a, name="p1").exists()
    browser.post("/projects/new/", {"name": "p2", "team": team_b.pk})
    assert not Project.objects.filter(name="p2").exists()
    viewer = Client()
    viewer.force_login(victor)
    assert viewer.post("/projects/new/", {"name": "p3", "team": team_a.pk}).status_code == 403


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/projects/new/", {"name": "p", "team": "abc"}),
        ("/accounts/tokens/", {"name": "t", "team": "1; drop table"}),
        ("/editor/check/", {"editor_mode": "yaml", "config_yaml": "{{{: ["}),
        ("/editor/check/", {"editor_mode": "yaml", "config_yaml": "- a\n- list\n"}),
        ("/editor/check/", {"editor_mode": "form", "rollout_batch_size": "1e999", "seed": "x"}),
        ("/editor/check/", {"editor_mode": "yaml", "config_yaml": "x", "source_format": "cobol"}),
    ],
)
def test_bad_form_input_is_never_a_500(browser, url, data):
    assert browser.post(url, data).status_code in (200, 302)


def test_bad_run_action_input_is_never_a_500(browser, alice, team_a, make_experiment):
    run = Run.objects.create(experiment=make_experiment(alice, team_a), status="failed")
    for data in ({"checkpoint": "abc"}, {"checkpoint": "999999"}, {}):
        assert browser.post(f"/runs/{run.pk}/resume/", data).status_code == 302
        assert browser.post(f"/runs/{run.pk}/fork/", {**data, "overrides": "no equals"}).status_code == 302
    refused = browser.post(f"/experiments/{run.experiment.pk}/launch/", {"overrides": "max_steps"}, follow=True)
    assert refused.redirect_chain == [(f"/experiments/{run.experiment.pk}/#launch-form", 302)]  # POST-redirect-GET
    assert refused.status_code == 200 and "each override must be" in refused.content.decode()  # shown at the form
    assert Run.objects.count() == 1


def test_launch_experiment_command_queues_a_run(alice, team_a, make_experiment, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice, team_a)
    out = StringIO()
    with django_capture_on_commit_callbacks() as callbacks:
        call_command("launch_experiment", str(experiment.pk), "--override", "max_steps=4", stdout=out)
    run = Run.objects.get(experiment=experiment)
    assert out.getvalue().startswith(f"run: {run.pk} ") and run.overrides == ["max_steps=4"] and len(callbacks) == 1
    with pytest.raises(CommandError, match="max_steps"):
        call_command("launch_experiment", str(experiment.pk), "--override", "max_steps=-1", stdout=StringIO())
