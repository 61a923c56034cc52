"""Preflight: a valid config that cannot run on this machine is refused before any worker starts,
with every reason, and the trainer exits 2 (never retried by the platform)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trainer.config import validate_config
from trainer.config.preflight import (
    check_devices,
    check_megatron_models,
    check_packages,
    check_paths,
    installed,
)
from trainer.config.schema import PipelineConfig

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "demo_grpo_cpu.yaml"


def demo(*overrides: str) -> PipelineConfig:
    result = validate_config(DEMO.read_text(), list(overrides))
    assert result.ok, result.errors
    return result.config


@pytest.mark.skipif(installed("wandb"), reason="wandb is installed here")
def test_a_missing_tracker_package_is_named_with_what_is_available() -> None:
    issues = check_packages(demo("track_with=wandb"), backend="local")
    assert [i.path for i in issues] == ["track_with"]
    assert "'wandb' is not installed here; available: tensorboard, stdout, none" in issues[0].message
    assert check_packages(demo(), backend="local") == []


def test_gpu_only_strategies_need_cuda_devices() -> None:
    raw = yaml.safe_load(DEMO.read_text())
    raw["actor_train"]["strategy_args"] = {"strategy_name": "megatron_train", "strategy_config": {}}
    raw["actor_train"]["device_mapping"] = "list(range(0,4))"
    raw["actor_infer"]["generating_args"]["max_new_tokens"] = 3
    config = PipelineConfig.model_validate(raw)  # schema only: preflight is independent of the rules
    issues = check_devices(config, gpus=2)
    assert [(i.path, "needs 4 CUDA device(s) on a node; this machine has 2" in i.message) for i in issues] == [
        ("actor_train.device_mapping", True)
    ]
    assert check_devices(config, gpus=8) == []
    assert check_devices(demo(), gpus=0) == []  # torch_train / hf_infer run on CPU


def test_missing_models_and_data_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    rows = tmp_path / "rows.jsonl"
    config = demo(f"actor_train.data_args.file_name={rows}", "actor_train.data_args.prompt=prompt",
                  "~actor_train.data_args.synthetic", "pretrain=Qwen/Qwen2.5-0.5B")
    found = {i.path: i.message for i in check_paths(config)}
    assert found["actor_train.data_args.file_name"] == f"{str(rows)!r} does not exist on this machine"
    assert "neither a folder here nor in the local HF cache" in found["pretrain"]
    rows.write_text('{"prompt": "x"}\n')
    (tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B").mkdir(parents=True)
    assert check_paths(config) == []


def test_validate_preflight_on_the_command_line() -> None:
    ok = subprocess.run([sys.executable, "-m", "trainer", "validate", str(DEMO), "--preflight"], cwd=REPO,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "trainer", "validate", str(DEMO), "--preflight",
                          "actor_train.data_args.file_name=/no/such/rows.jsonl", "~actor_train.data_args.synthetic",
                          "actor_train.data_args.prompt=prompt"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "cannot run on this machine" in bad.stderr and "/no/such/rows.jsonl" in bad.stderr


def test_run_stops_at_preflight_with_a_failed_status_event(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "run", str(DEMO), f"output_dir={out}", "--workers", "local",
         "actor_train.data_args.file_name=/no/such/rows.jsonl", "~actor_train.data_args.synthetic",
         "actor_train.data_args.prompt=prompt"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    statuses = [e for e in events if e.get("type") == "status"]
    assert [s["data"]["state"] for s in statuses] == ["failed"]
    message = statuses[0]["data"]["message"]
    assert message.startswith("preflight failed: actor_train.data_args.file_name:") and "/no/such/rows.jsonl" in message
    assert not (out / "checkpoints").exists()


def test_a_megatron_role_whose_model_type_megatron_cannot_build_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local tiny model folder (its config.json) and the same in the HF cache: qwen3_next is refused before any
    worker starts, qwen3_moe passes; a model that is not here is check_paths' finding, not this one's."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = tmp_path / "tiny"
    model.mkdir()

    def megatron_on(path: str, model_type: str) -> PipelineConfig:
        (model / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 8}))
        raw = yaml.safe_load(DEMO.read_text())
        raw["pretrain"] = path
        raw["actor_train"]["strategy_args"] = {"strategy_name": "megatron_train", "strategy_config": {}}
        raw["actor_train"]["model_args"] = {**raw["actor_train"].get("model_args", {}), "model_name_or_path": path}
        raw["actor_infer"]["generating_args"]["max_new_tokens"] = 3
        return PipelineConfig.model_validate(raw)  # schema only, as the GPU test above

    issues = check_megatron_models(megatron_on(str(model), "qwen3_next"))
    assert [i.path for i in issues] == ["actor_train.model_args.model_name_or_path"]
    assert "model_type 'qwen3_next'" in issues[0].message and "qwen3_moe" in issues[0].message
    assert check_megatron_models(megatron_on(str(model), "qwen3_moe")) == []
    # a hub id read from the local cache, offline
    snapshot = tmp_path / "hub" / "models--Org--Tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--Org--Tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--Org--Tiny" / "refs" / "main").write_text("abc")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe"}))
    issues = check_megatron_models(megatron_on("Org/Tiny", "qwen3"))
    assert ["model_type 'qwen3_5_moe'" in i.message for i in issues] == [True]
    assert check_megatron_models(megatron_on("Org/Absent", "qwen3")) == []
