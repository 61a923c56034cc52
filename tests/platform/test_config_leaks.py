"""Config handling never hands a team anything of another team or of the server (issue 10, 1-3).

Team A has a run with files on disk; Bob (team B) tries every way config input had around the
object scoping: a config string naming A's files, `${oc.env:…}` on the server, and paths into A's
run directory or checkpoint. Each answer is a 400 naming the field, and no answer differs between
a file that exists and one that does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from policylab.experiments.models import Experiment, Run, RunStatus
from policylab.jobs import supervisor
from trainer.config import load_config

pytestmark = pytest.mark.django_db

SECRET = "team-a-secret-exp-name"


@pytest.fixture
def team_a_run(alice, team_a, make_experiment) -> Run:
    """A finished run of team A with a config, events and a checkpoint in its run directory."""
    run = Run.objects.create(experiment=make_experiment(alice, team_a), created_by=alice, status=RunStatus.SUCCEEDED)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.yaml").write_text(f"exp_name: {SECRET}\nseed: 3\n")
    (run.run_dir / "events.jsonl").write_text(json.dumps({"prompt": SECRET, "response": SECRET}) + "\n")
    (run.run_dir / "checkpoints" / "step_2").mkdir(parents=True)
    return run


@pytest.fixture
def bob_project(api_bob, team_b) -> int:
    return api_bob.post("/api/projects/", {"team": team_b.pk, "name": "p"}, format="json").json()["id"]


def body_of(response) -> str:
    return response.content.decode()


def test_a_config_naming_a_file_is_text_not_a_path(api_bob, bob_project, team_a_run: Run) -> None:
    paths = [team_a_run.run_dir / "config.yaml", Path("/proc/self/status"), Path(__file__).parents[2] / "docker" / "compose.yaml"]
    answers = []
    for path in [*paths, team_a_run.run_dir / "no-such-file.yaml"]:
        validate = api_bob.post("/api/configs/validate/", {"config": str(path)}, format="json")
        create = api_bob.post("/api/experiments/", {"project": bob_project, "name": "x", "config": str(path)}, format="json")
        assert validate.status_code == 400 and create.status_code == 400
        for text in (body_of(validate), body_of(create)):
            assert SECRET not in text and "VmRSS" not in text and "services" not in text
        answers.append([e["message"] for e in validate.json()["errors"]])
    # the same words whether the file exists or not: existence is not disclosed
    assert all(a == answers[0] for a in answers[1:]), answers
    assert Experiment.objects.filter(project_id=bob_project).count() == 0


def test_env_references_are_kept_as_written_and_never_resolved_by_the_server(
    api_bob, bob_project, demo_yaml, monkeypatch
) -> None:
    monkeypatch.setenv("POLICYLAB_LEAK_PROBE", "server-side-value")
    text = demo_yaml + "\nexp_name: ${oc.env:POLICYLAB_LEAK_PROBE,x}\n"
    validate = api_bob.post("/api/configs/validate/", {"config": text}, format="json")
    assert validate.status_code == 200, validate.json()
    create = api_bob.post("/api/experiments/", {"project": bob_project, "name": "e", "config": text}, format="json")
    assert create.status_code == 201
    experiment = Experiment.objects.get(pk=create.json()["id"])
    launch = api_bob.post(
        f"/api/experiments/{experiment.pk}/runs/", {"overrides": ["+tracker_kwargs.project=${oc.env:HOME}"]}, format="json"
    )
    assert launch.status_code == 201, launch.json()
    for response in (validate, create, launch, api_bob.get(f"/api/experiments/{experiment.pk}/")):
        assert "server-side-value" not in body_of(response) and str(Path.home()) not in body_of(response)
    assert experiment.config["exp_name"] == "${oc.env:POLICYLAB_LEAK_PROBE,x}"
    assert "exp_name: ${oc.env:POLICYLAB_LEAK_PROBE,x}" in experiment.config_yaml  # shown unresolved, still live
    # The run's config file keeps the reference; the trainer substitutes it from its own environment.
    run = Run.objects.get(experiment=experiment)
    path = supervisor.write_run_config(run, False)
    assert "server-side-value" not in path.read_text()
    assert load_config(path, env={"POLICYLAB_LEAK_PROBE": "cluster-value", "HOME": "/h"}).exp_name == "cluster-value"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("actor_train.data_args.file_name", "{run}/events.jsonl"),
        ("actor_train.data_args.file_name", "examples/../var/runs/run-1/events.jsonl"),
        ("pretrain", "{run}/checkpoints/step_2"),
        ("tracker_kwargs.log_dir", "{run}/tensorboard"),
        ("profiler_output_dir", "/tmp/anywhere"),
        ("render_save_dir", "../../elsewhere"),
        ("actor_train.system_envs.LD_PRELOAD", "/tmp/x.so"),
        # issue 34: URLs and tiny:// names were not paths to the checks, and system_envs was a deny-list
        ("tracker_kwargs.log_dir", "file:///some/where"),
        ("render_save_dir", "s3://bucket/renders"),
        ("actor_train.data_args.cache_path", "hdfs://namenode/cache"),
        ("actor_train.model_args.model_name_or_path", "tiny:///../../run-3/models/tiny?seed=0"),
        ("actor_train.system_envs.HF_ENDPOINT", "http://127.0.0.1:9999"),
    ],
)
def test_paths_outside_the_run_are_refused_by_field(api_bob, bob_project, demo_yaml, team_a_run, field, value) -> None:
    config = yaml.safe_load(demo_yaml)
    config["actor_train"]["data_args"].pop("synthetic") if field.endswith("file_name") else None
    node = config
    *parents, leaf = field.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value.format(run=team_a_run.run_dir)
    response = api_bob.post("/api/configs/validate/", {"config": config}, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert field in [e["field"] for e in errors], errors
    create = api_bob.post("/api/experiments/", {"project": bob_project, "name": "p", "config": config}, format="json")
    assert create.status_code == 400 and SECRET not in body_of(create)


def test_paths_inside_the_read_roots_and_the_run_dir_are_accepted(api_bob, demo_yaml, settings, tmp_path) -> None:
    settings.POLICYLAB_READ_ROOTS = [str(tmp_path / "data")]
    config = yaml.safe_load(demo_yaml)
    config["tracker_kwargs"]["log_dir"] = "tb"
    config["profiler_output_dir"] = "profiles/"
    config["actor_train"]["data_args"] = {"file_name": str(tmp_path / "data" / "train.jsonl"), "prompt": "prompt"}
    response = api_bob.post("/api/configs/validate/", {"config": config}, format="json")
    errors = [e for e in response.json()["errors"] if "outside" in e["message"] or "run directory" in e["message"]]
    assert errors == []


def test_the_supervisor_rebases_paths_into_the_run_dir(alice, team_a, make_experiment, demo_yaml, settings) -> None:
    config = yaml.safe_load(demo_yaml)
    config["tracker_kwargs"]["log_dir"] = "tb"
    config["actor_train"]["model_args"]["model_name_or_path"] = "examples/models/tiny"
    run = Run.objects.create(experiment=make_experiment(alice, team_a, source=config), created_by=alice)
    written = yaml.safe_load(supervisor.write_run_config(run, False).read_text())
    assert written["tracker_kwargs"]["log_dir"] == str(run.run_dir / "tb")
    assert written["actor_train"]["model_args"]["model_name_or_path"] == str(
        Path(settings.POLICYLAB_TRAINER_WORKDIR) / "examples" / "models" / "tiny"
    )
    env = supervisor.runtime_env()["env_vars"]
    assert env["POLICYLAB_READ_ROOTS"].split(":") == settings.POLICYLAB_READ_ROOTS
    assert env["POLICYLAB_URL_PREFIXES"] == "" and env["POLICYLAB_SYSTEM_ENVS_ALLOW"] == ""  # the trainer checks again
    assert "DJANGO_SECRET_KEY" not in env["POLICYLAB_CONFIG_ENV_ALLOW"]
