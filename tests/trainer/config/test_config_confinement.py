"""Path confinement: reads under the read roots or the run dir, writes inside the run dir (issues 10, 3, 34)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from config_testing import base, changed

from trainer.config import validate_config
from trainer.config.confinement import PathPolicy, check_confinement, path_fields, rebase_paths, url_prefixes

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


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_sibling_whose_name_extends_a_root_is_outside_it(tmp_path: Path, on_disk: bool) -> None:
    """/data/models-secret is not inside the read root /data/models, nor runs/70 inside the run dir runs/7."""
    models, run_dir = tmp_path / "data" / "models", tmp_path / "runs" / "7"
    for folder in (models, tmp_path / "data" / "models-secret", run_dir, tmp_path / "runs" / "70"):
        folder.mkdir(parents=True)
    policy = PathPolicy((str(models),), str(tmp_path), str(run_dir))
    siblings = config_with(pretrain=str(tmp_path / "data" / "models-secret" / "m"),
                           actor_train__data_args__file_name=str(tmp_path / "runs" / "70" / "rows.jsonl"),
                           tracker_kwargs={"log_dir": str(tmp_path / "runs" / "70" / "tb")})
    answer = refused(siblings, policy, on_disk=on_disk)
    assert {"pretrain", "actor_train.data_args.file_name", "tracker_kwargs.log_dir"} <= set(answer)
    inside = config_with(pretrain=str(models / "m"), actor_train__data_args__file_name=str(run_dir / "rows.jsonl"),
                         tracker_kwargs={"log_dir": str(run_dir / "tb")})
    assert not {"pretrain", "actor_train.data_args.file_name", "tracker_kwargs.log_dir"} & set(
        refused(inside, policy, on_disk=on_disk))


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


# --- issue 34: URL schemes, tracker kwargs, tiny:// names, the system_envs allow-list -------------

URLS = ["file:///some/where", "file:relative", "s3://bucket/x", "gs://bucket/x", "hdfs://namenode/x",
        "http://127.0.0.1:9000/x", "simplecache::s3://bucket/x"]
WRITE_FIELDS = ["tracker_kwargs.log_dir", "render_save_dir", "profiler_output_dir", "actor_train.data_args.cache_path"]


def set_dotted(config: dict, dotted: str, value) -> dict:
    node = config
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return config


@pytest.mark.parametrize("field", WRITE_FIELDS)
@pytest.mark.parametrize("url", URLS)
def test_a_url_is_never_a_path_a_run_writes(tmp_path: Path, field: str, url: str) -> None:
    """`tracker_kwargs.log_dir: file:///some/where` passed every check and tensorboard wrote there."""
    result = validate_config(set_dotted({**base(), "track_with": "tensorboard"}, field, url))
    assert result.ok, result.errors
    before_launch = PathPolicy((str(tmp_path / "data"),), str(tmp_path))
    in_the_trainer = PathPolicy((str(tmp_path / "data"),), str(tmp_path), str(tmp_path / "run-7"))
    for policy, on_disk in ((before_launch, False), (in_the_trainer, True)):
        answer = refused(result.config, policy, on_disk=on_disk)
        assert field in answer and f"is a {url.split(':')[0]}: URL" in answer[field], answer
        assert "this deployment allows no URLs (POLICYLAB_URL_PREFIXES" in answer[field]


@pytest.mark.parametrize("url", URLS)
def test_a_url_is_never_a_path_a_run_reads(tmp_path: Path, url: str) -> None:
    config = config_with(actor_train__data_args__file_name=url, actor_train__model_args__model_name_or_path=url)
    answer = refused(config, PathPolicy((str(tmp_path),), str(tmp_path)))
    assert "URL; use a path under" in answer["actor_train.data_args.file_name"]
    assert "URL; use a path under" in answer["actor_train.model_args.model_name_or_path"]


def test_a_deployment_allows_named_buckets_and_nothing_next_to_them(tmp_path: Path) -> None:
    policy = PathPolicy((), str(tmp_path), str(tmp_path / "run-7"), ("s3://team-bucket",))
    fine = config_with(render_save_dir="s3://team-bucket/renders/", profiler_output_dir="s3://team-bucket-b/x",
                       tracker_kwargs={"log_dir": "s3://team-bucket/../other-bucket/tb"})
    answer = refused(fine, policy)
    assert "render_save_dir" not in answer
    assert "or a URL under s3://team-bucket/" in answer["profiler_output_dir"]
    assert "tracker_kwargs.log_dir" in answer


def test_every_path_a_tracker_is_given_is_confined(tmp_path: Path) -> None:
    """wandb.init and swanlab.init take tracker_kwargs as they are, `settings` mappings included."""
    config = config_with(tracker_kwargs={"project": "p", "dir": "wandb/", "settings": {"root_dir": "/etc/cron.d"},
                                         "logdir": ["not", "text"], "load": "/etc/passwd"})
    fields = {field: access for field, _, access in path_fields(config) if field.startswith("tracker_kwargs")}
    assert fields == {"tracker_kwargs.dir": "write", "tracker_kwargs.settings.root_dir": "write",
                      "tracker_kwargs.logdir": "write", "tracker_kwargs.load": "read"}
    answer = refused(config, PathPolicy((str(tmp_path),), str(tmp_path)))
    assert sorted(f for f in answer if f.startswith("tracker_kwargs")) == [
        "tracker_kwargs.load", "tracker_kwargs.logdir", "tracker_kwargs.settings.root_dir"]
    assert answer["tracker_kwargs.logdir"] == "['not', 'text'] is not a path: write a folder or file name as text"


def test_rebase_writes_a_trackers_nested_folder_inside_the_run(tmp_path: Path) -> None:
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path), str(tmp_path / "run-3"))
    config = config_with(tracker_kwargs={"settings": {"root_dir": "wandb"}}, render_save_dir="renders")
    raw = rebase_paths(config.model_dump(mode="json"), config, policy)
    assert raw["tracker_kwargs"]["settings"]["root_dir"] == str(tmp_path / "run-3" / "wandb")
    assert raw["render_save_dir"] == str(tmp_path / "run-3" / "renders")


ESCAPE = "tiny:///../../run-3/models/tiny?seed=0"


@pytest.mark.parametrize("ref", [ESCAPE, "tiny://tiny/../../run-3", "tiny://../run-3", "tiny://tiny@x",
                                 "tiny://huge", "tiny://tiny?seed=1&seed=2", "tiny://tiny?size=small"])
def test_a_tiny_reference_is_a_plain_size_name_everywhere(ref: str) -> None:
    """Validation (CLI and platform alike) refuses it, naming the field and the sizes there are."""
    result = validate_config(changed({"actor_train.model_args.model_name_or_path": ref}))
    assert [i.path for i in result.errors] == ["actor_train.model_args.model_name_or_path"], result.errors
    assert repr(ref) in result.errors[0].message


def test_a_tiny_reference_names_models_only() -> None:
    result = validate_config(changed({"actor_train.data_args.file_name": "tiny://tiny"}))
    assert [(i.path, "only model fields accept it" in i.message) for i in result.errors] == [
        ("actor_train.data_args.file_name", True)]
    for fine in ("tiny://tiny?seed=3", "tiny://small", "tiny://m20/", "tiny://"):
        assert validate_config(changed({"actor_train.model_args.model_name_or_path": fine})).ok, fine


def test_the_trainer_never_opens_another_runs_model_through_tiny(tmp_path: Path) -> None:
    """A worker memory-mapped run-3's model: materialise_tiny_models joined the name to output_dir/models and
    reused any folder holding a config.json. It refuses the name now, before anything is read or built."""
    from trainer.pipeline.run.models import materialise_tiny_models

    other = tmp_path / "run-3" / "models" / "tiny-seed0"
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    (tmp_path / "run-7" / "output" / "models").mkdir(parents=True)  # the run's own models folder, as in a run
    config = config_with(output_dir=str(tmp_path / "run-7" / "output"))
    escaping = config.model_copy(update={"pretrain": "tiny:///../../../run-3/models/tiny?seed=0"})
    with pytest.raises(ValueError, match="a built-in model is tiny://<size>"):
        materialise_tiny_models(escaping)


SIX = ["TMPDIR", "HF_HOME", "HF_ENDPOINT", "https_proxy", "BASH_ENV", "GCONV_PATH"]


def env_answer(envs: dict, policy: PathPolicy | None = None) -> dict[str, str]:
    config = config_with(actor_train__system_envs=envs)
    return {f.removeprefix("actor_train.system_envs."): m for f, m in
            refused(config, policy or PathPolicy((), "/")).items() if "system_envs" in f}


def test_system_envs_is_an_allow_list() -> None:
    answer = env_answer({name: "x" for name in [*SIX, "LD_PRELOAD", "PYTHONPATH", "NCCL_DEBUG_FILE",
                                                 "VLLM_PLUGINS", "WANDB_BASE_URL"]})
    assert sorted(answer) == sorted([*SIX, "LD_PRELOAD", "PYTHONPATH", "NCCL_DEBUG_FILE", "VLLM_PLUGINS",
                                     "WANDB_BASE_URL"])
    assert answer["TMPDIR"].startswith("TMPDIR is not an allowed system_envs variable (allowed: NCCL_*, CUDA_*")
    assert answer["TMPDIR"].endswith("a deployment allows it by listing TMPDIR in POLICYLAB_SYSTEM_ENVS_ALLOW")
    assert answer["NCCL_DEBUG_FILE"].startswith("NCCL_DEBUG_FILE names a file, folder, address or plugin, which the "
                                                "NCCL_* family does not admit")
    assert "the interpreter, the loader or the platform itself reads it" in answer["LD_PRELOAD"]
    what_rl_configs_set = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "eth0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                           "VLLM_USE_V1": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
                           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "OMP_NUM_THREADS": "1",
                           "TOKENIZERS_PARALLELISM": "false", "WANDB_PROJECT": "p", "RAY_DEDUP_LOGS": "0",
                           "USE_MODELSCOPE": "1", "NVTE_FUSED_ATTN": "1"}
    assert env_answer(what_rl_configs_set) == {}


def test_a_deployment_extends_the_system_envs_allow_list_but_never_to_the_loader() -> None:
    policy = PathPolicy((), "/", env_allow=("HF_HOME", "MY_*", "LD_PRELOAD"))
    assert sorted(env_answer({"HF_HOME": "/cache", "MY_FLAG": "1", "MY_DIR": "/x", "LD_PRELOAD": "/x.so"}, policy)) == [
        "LD_PRELOAD", "MY_DIR"]


def test_the_trainer_reads_the_deployment_policy_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYLAB_READ_ROOTS", "/data")
    monkeypatch.setenv("POLICYLAB_URL_PREFIXES", "s3://a, gs://b/")
    monkeypatch.setenv("POLICYLAB_SYSTEM_ENVS_ALLOW", "HF_HOME,")
    policy = PathPolicy.from_env("/runs/run-1")
    assert (policy.url_prefixes, policy.env_allow) == (("s3://a", "gs://b/"), ("HF_HOME",))
    assert url_prefixes(policy.url_prefixes) == ("s3://a/", "gs://b/")  # s3://a never admits s3://a-b


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_pass_the_platforms_checks(path: Path) -> None:
    result = validate_config(path)
    assert result.ok, result.errors
    roots = (*(str(REPO / d) for d in ("examples", "data", "var/data", "var/models")), "/models")
    assert check_confinement(result.config, PathPolicy(roots, str(REPO))) == []


def test_the_roll_configs_system_envs_still_validate() -> None:
    for name in ("roll_main_agentic.yaml", "roll_v0.3_rlvr_megatron.yaml"):
        config = validate_config(REPO / "tests/trainer/importers/corpus" / name).config
        assert config is not None and config.system_envs
        assert [i for i in check_confinement(config, PathPolicy((), "/")) if "system_envs" in i.path] == []


def test_the_trainer_refuses_a_tensorboard_url_before_writing_anything(tmp_path: Path) -> None:
    """The reported write: `track_with: tensorboard`, `tracker_kwargs.log_dir: file:///…` outside the run."""
    outside = tmp_path / "some" / "where"
    config = yaml.safe_load((REPO / "examples" / "demo_grpo_cpu.yaml").read_text())
    config.update(output_dir=str(tmp_path / "run"), max_steps=1, save_steps=1, eval_steps=0, track_with="tensorboard",
                  tracker_kwargs={"log_dir": f"file://{outside}"})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "POLICYLAB_READ_ROOTS": str(REPO / "examples")}
    proc = subprocess.run([sys.executable, "-m", "trainer", "run", str(path), "--workers", "local"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"tracker_kwargs.log_dir: 'file://{outside}' is a file: URL" in proc.stderr
    assert not outside.exists()


def test_an_environments_data_file_is_a_confined_read(tmp_path: Path) -> None:
    """ROLL's GEM dataset environments read env_config.dataset_name as a file: another team's run directory (whose
    events the environment would show the model, and the rollouts show its author) is refused like a data file;
    a file under the read roots and a hub id (the local HF cache) pass."""
    policy = PathPolicy((str(tmp_path / "data"),), str(tmp_path / "runs" / "mine"))
    from trainer.config.schema import CustomEnvConfig

    def with_dataset(name: str):
        env = CustomEnvConfig(env_type="roll_math", env_config={"dataset_name": name})
        return config_with().model_copy(update={"custom_envs": {"Math": env}})

    field = "custom_envs.Math.env_config.dataset_name"
    assert field in refused(with_dataset(str(tmp_path / "runs" / "theirs" / "events.jsonl")), policy)
    assert field in refused(with_dataset("/etc/passwd"), policy)
    assert field not in refused(with_dataset(str(tmp_path / "data" / "math.jsonl")), policy)
    assert field not in refused(with_dataset("open-r1/DAPO-Math-17k-Processed"), policy)
