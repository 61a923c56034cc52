"""Reward functions by name. Names equal `trainer.config.registries.REWARD_TYPES` (a test checks it).

Each entry is `fn(prompts, responses, samples, **options) -> list[float]`; `samples[i]` carries the
sample's fields (`answer`, `task`, `tag`, …). `build_reward(name, reward_scale, **options)` binds the
options once (e.g. from `rewards.<domain>.reward_kwargs`) and returns a contract-shaped
`(prompts, responses, samples) -> list[float]`. Rewards are resolved by name only, never imported
from a path named in a config.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from trainer.data.synthetic import get_task
from trainer.rewards.code_sandbox import CodeSandboxOptions, code_sandbox_reward
from trainer.rewards.crossthinkqa import crossthinkqa_rule_reward
from trainer.rewards.format import DEFAULT_FORMAT_PATTERN, format_reward
from trainer.rewards.ifeval import ifeval_rule_reward
from trainer.rewards.llm_judge import LLMJudgeOptions, llm_judge_reward
from trainer.rewards.math_rule import math_score
from trainer.rewards.reward_model import score_with_reward_model

RewardFn = Callable[[Sequence[str], Sequence[str], Sequence[dict[str, Any]]], list[float]]


def _answer(sample: dict[str, Any], index: int) -> str:
    answer = sample.get("answer")
    if answer is None:
        raise ValueError(f"samples[{index}].answer: missing; this reward needs a reference answer "
                         "(set data_args.response to the answer column)")
    return str(answer)


def math_rule_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                     *, last_number_fallback: bool = False, percent_as_fraction: bool = False) -> list[float]:
    """1.0 when the response's final answer (`#### x` / `\\boxed{x}`) equals the sample's answer, else 0.0."""
    return [
        math_score(resp, _answer(s, i), last_number_fallback=last_number_fallback,
                   percent_as_fraction=percent_as_fraction)
        for i, (resp, s) in enumerate(zip(responses, samples, strict=True))
    ]


def synthetic_reward(prompts: Sequence[str], responses: Sequence[str],
                     samples: Sequence[dict[str, Any]]) -> list[float]:
    """The verifier of the sample's synthetic task (`samples[i]["task"]`), in [0, 1]."""
    scores = []
    for i, (resp, s) in enumerate(zip(responses, samples, strict=True)):
        if not s.get("task"):
            raise ValueError(f"samples[{i}].task: missing; the synthetic reward needs the task name")
        scores.append(get_task(s["task"]).score(resp, _answer(s, i)))
    return scores


def format_penalty_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                          *, pattern: str = DEFAULT_FORMAT_PATTERN, penalty: float = -1.0,
                          reward: float = 0.0) -> list[float]:
    """`reward` for responses that fully match `pattern`, `penalty` for the others."""
    return [format_reward(resp, pattern, penalty, reward) for resp in responses]


def reward_model_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                        *, model_name_or_path: str, batch_size: int = 16, max_length: int = 2048,
                        device: str = "cpu", label_index: int = 0,
                        adapter_name_or_path: str | None = None) -> list[float]:
    """Scalar score of a local HF sequence-classification model on `prompt + response` (a trained LoRA adapter
    merged into it when adapter_name_or_path names one)."""
    return score_with_reward_model(list(prompts), list(responses), model_name_or_path, batch_size=batch_size,
                                   max_length=max_length, device=device, label_index=label_index,
                                   adapter=adapter_name_or_path)


REWARDS: dict[str, Callable[..., list[float]]] = {
    "math_rule": math_rule_reward,
    "synthetic": synthetic_reward,
    "format": format_penalty_reward,
    "reward_model": reward_model_reward,
    "code_sandbox": code_sandbox_reward,
    "llm_judge": llm_judge_reward,
    "ifeval_rule": ifeval_rule_reward,
    "crossthinkqa_rule": crossthinkqa_rule_reward,
}

# Rewards whose options are a dataclass: checked (names and values) when the reward is built.
OPTIONS: dict[str, type] = {"code_sandbox": CodeSandboxOptions, "llm_judge": LLMJudgeOptions}


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse options the reward does not take, naming the valid ones; validate their values where
    the reward has an options dataclass."""
    fn = REWARDS[name]
    if name in OPTIONS:
        valid = [f.name for f in dataclasses.fields(OPTIONS[name])]
    else:
        valid = [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"reward_kwargs.{unknown[0]}: not an option of the {name} reward; "
                         f"valid: {', '.join(valid) or 'none'}")
    if name in OPTIONS:
        OPTIONS[name](**options)


def build_reward(name: str, reward_scale: float = 1.0, **options: Any) -> RewardFn:
    """`REWARDS[name]` with `options` bound and its scores multiplied by `reward_scale`."""
    if name not in REWARDS:
        raise ValueError(f"reward_type: unknown reward {name!r}; valid: {', '.join(sorted(REWARDS))}")
    check_options(name, options)
    fn = REWARDS[name]

    def reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]]) -> list[float]:
        if not len(prompts) == len(responses) == len(samples):
            raise ValueError(f"{name} reward: prompts, responses and samples differ in length "
                             f"({len(prompts)}, {len(responses)}, {len(samples)})")
        return [reward_scale * score for score in fn(prompts, responses, samples, **options)]

    return reward
