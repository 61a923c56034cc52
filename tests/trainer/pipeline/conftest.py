"""Small, fast RLVR runs on the tiny model for the pipeline tests."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
DEMO_GRPO = REPO_ROOT / "examples" / "demo_grpo_cpu.yaml"

# a few seconds per run: 4 prompts x 4 samples, 2 optimizer steps per rollout, 2 PPO epochs
FAST = (
    "rollout_batch_size=4",
    "num_return_sequences_in_group=4",
    "val_batch_size=8",
    "response_length=4",
    "actor_train.training_args.per_device_train_batch_size=4",
    "actor_train.training_args.gradient_accumulation_steps=2",
    "actor_train.data_args.synthetic.num_prompts=64",
    "ppo_epochs=2",
    "track_with=none",
    # the LR these runs were measured with (the GRPO demo decays it linearly over its 250 steps; over 2-6 it would
    # change what each test measured)
    "actor_train.training_args.lr_scheduler_type=constant",
)


def load_cfg(output_dir: Path, *overrides: str, source: Path = DEMO_GRPO) -> Any:
    from trainer.config import load_config

    return load_config(source, [*FAST, f"output_dir={output_dir}", *overrides])


def events(output_dir: Path, kind: str | None = None) -> list[dict]:
    # "\n" only: str.splitlines() also breaks at U+0085 / U+2028, which sampled response text may hold
    lines = (Path(output_dir) / "events.jsonl").read_text(encoding="utf-8").split("\n")
    all_events = [json.loads(line) for line in lines if line.strip()]
    return [e for e in all_events if kind is None or e["type"] == kind]


def metrics_by_step(output_dir: Path) -> dict[int, dict[str, float]]:
    return {e["step"]: e["data"]["values"] for e in events(output_dir, "metrics")}


def run_local(cfg: Any, run_id: str = "test", **kwargs: Any) -> int:
    from trainer.pipeline.runner import RunIdentity, run_training

    return run_training(cfg, RunIdentity(run_id=run_id), backend="local", log=lambda line: None, **kwargs)


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny-model runs gain nothing from intra-op threads, and OpenMP threads spinning on a busy
    2-core machine can slow a run tenfold: use one thread in the training process."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A private local Ray head for the session (shared when another area's fixture started one)."""
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["RAY_USE_RANDOM_PORTS"] = "1"
    ray.init(address="local", num_cpus=8, num_gpus=0, object_store_memory=256 * 1024**2,
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def cli(args: Sequence[str], env: dict[str, str] | None = None, timeout: float = 240) -> Any:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def model() -> Any:
    """A tiny Qwen2 (seed 3) in eval mode, for the tests that compare the loop's loss with its formula."""
    import tempfile

    from transformers import AutoModelForCausalLM

    from trainer.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp), seed=3)
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
