"""Path confinement: reads under the read roots or the run dir, writes inside the run dir (issue 10, 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from config_testing import base

from trainer.config import validate_config
from trainer.config.confinement import PathPolicy, check_confinement, path_fields, rebase_paths

REPO = Path(__file__).resolve().parents[3]


def config_with(**changes):
    config = base()
    for dotted, value in changes.items():
        node = config
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    result = validate_config(config)
    assert result.ok, result.errors
    return result.config


def refused(config, policy, **kwargs) -> dict[str, str]:
    return {i.path: i.message for i in check_confinement(config, policy, **kwargs)}


def test_every_path_field_of_the_schema_is_found() -> None:
    config = config_with(tracker_kwargs={"log_dir": "tb", "project": "p"}, profiler_output_dir="prof")
    fields = {field: access for field, _, access in path_fields(config)}
    assert fields["actor_train.model_args.model_name_or_path"] == "read"
    assert fields["actor_train.data_args.file_name"] == "read"
    assert fields["tracker_kwargs.log_dir"] == fields["profiler_output_dir"] == fields["output_dir"] == "write"
    assert "tracker_kwargs.project" not in fields


def test_reads_outside_the_roots_are_refused_lexically(tmp_path: Path) -> None:
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path))
    config = config_with(actor_train__data_args__file_name="data/train.jsonl", pretrain="/models/x")
    answer = refused(config, policy)
    assert answer["pretrain"] == (
        f"'/models/x' is outside the folders runs may read: {tmp_path / 'data'} (and the run's own directory)"
    )
    assert "actor_train.data_args.file_name" not in answer
    escaping = config_with(actor_train__data_args__file_name="data/../runs/run-1/events.jsonl")
    assert "actor_train.data_args.file_name" in refused(escaping, policy)


def test_a_hub_id_is_a_model_but_never_a_data_file(tmp_path: Path) -> None:
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path))
    config = config_with(actor_train__model_args__model_name_or_path="Qwen/Qwen2.5-0.5B",
                         actor_train__data_args__file_name="org/file")
    assert list(refused(config, policy)) == ["actor_train.data_args.file_name"]
    (tmp_path / "Qwen" / "Qwen2.5-0.5B").mkdir(parents=True)  # a local folder of that name is a path
    assert "actor_train.model_args.model_name_or_path" in refused(config, policy, on_disk=True)


def test_writes_stay_inside_the_run_dir(tmp_path: Path) -> None:
    before_launch = PathPolicy((), str(tmp_path))
    config = config_with(tracker_kwargs={"log_dir": "/elsewhere"}, render_save_dir="../x", profiler_output_dir="ok/")
    assert sorted(f for f in refused(config, before_launch) if "model" not in f and "data" not in f) == [
        "render_save_dir", "tracker_kwargs.log_dir"]
    run_dir = tmp_path / "run-7"
    inside = config_with(tracker_kwargs={"log_dir": str(run_dir / "tb")})
    assert "tracker_kwargs.log_dir" not in refused(inside, PathPolicy((), str(tmp_path), str(run_dir)))
    assert "tracker_kwargs.log_dir" in refused(inside, before_launch)


def test_a_symlink_out_of_a_root_is_caught_on_disk(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "data" / "link").symlink_to(tmp_path / "secret")
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path))
    config = config_with(actor_train__data_args__file_name=str(tmp_path / "data" / "link" / "rows.jsonl"))
    assert "actor_train.data_args.file_name" not in refused(config, policy)  # lexically inside
    assert "actor_train.data_args.file_name" in refused(config, policy, on_disk=True)


def test_reserved_environment_variables_are_refused() -> None:
    config = config_with(system_envs={"LD_PRELOAD": "/x.so", "OMP_NUM_THREADS": "1"},
                         actor_train__system_envs={"POLICYLAB_READ_ROOTS": "/"})
    assert sorted(f for f in refused(config, PathPolicy((), "/")) if "system_envs" in f) == ["actor_train.system_envs.POLICYLAB_READ_ROOTS",
                                                           "system_envs.LD_PRELOAD"]


def test_rebase_makes_relative_paths_absolute(tmp_path: Path) -> None:
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path), str(tmp_path / "run-3"))
    config = config_with(actor_train__data_args__file_name="data/t.jsonl", tracker_kwargs={"log_dir": "tb"},
                         pretrain="Qwen/Qwen2.5-0.5B")
    raw = rebase_paths(config.model_dump(mode="json"), config, policy)
    assert raw["actor_train"]["data_args"]["file_name"] == str(tmp_path / "data" / "t.jsonl")
    assert raw["tracker_kwargs"]["log_dir"] == str(tmp_path / "run-3" / "tb")
    assert raw["pretrain"] == "Qwen/Qwen2.5-0.5B"  # a hub id stays a hub id


def test_the_trainer_refuses_a_config_outside_its_policy_before_opening_anything(tmp_path: Path) -> None:
    """With POLICYLAB_READ_ROOTS set (as the supervisor does), `trainer run` exits 2 (never retried)."""
    config = yaml.safe_load((REPO / "examples" / "demo_grpo_cpu.yaml").read_text())
    config["output_dir"] = str(tmp_path / "run")
    config["actor_train"]["data_args"] = {"file_name": "${oc.env:SOMEWHERE}/events.jsonl", "prompt": "prompt"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "POLICYLAB_READ_ROOTS": str(tmp_path / "data"), "SOMEWHERE": "/etc",
           "POLICYLAB_CONFIG_ENV_ALLOW": "SOMEWHERE"}
    proc = subprocess.run([sys.executable, "-m", "trainer", "run", str(path), "--workers", "local"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "actor_train.data_args.file_name: '/etc/events.jsonl' is outside the folders runs may read" in proc.stderr
