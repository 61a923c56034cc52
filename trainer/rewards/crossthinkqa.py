"""ROLL's CrossThinkQA rule reward (CrossThinkQARuleRewardWorker): a multiple-choice answer letter, graded on
format (a `\\boxed{}`) and correctness.

The answer is read after the last `</think>`: the last `\\boxed{X}` (format met), else the text after the
last "answer is", else the whole text. It is correct when its first upper-case character is the reference's
first character. The two flags give the reward by ROLL's scoring mode (its `reward_type`):

| correct | boxed | loose | soft | strict |
|---------|-------|-------|------|--------|
| yes     | yes   |  1.0  |  1.0 |  1.0   |
| yes     | no    |  1.0  |  0.5 | -1.0   |
| no      | yes   | -1.0  | -0.5 | -1.0   |
| no      | no    | -1.0  | -1.0 | -1.0   |

plus the 3-gram repetition penalty of the whole response (trainer.rewards.text_rules). ROLL's response-length
term is the section's response_length_penalty_coef (trainer.pipeline.dynamic_sampling), as for any reward.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from trainer.rewards.text_rules import after_last_think, repetition_penalty, strip_special_tokens

ScoringMode = Literal["loose", "soft", "strict"]
SCORING_MODES: tuple[str, ...] = ("loose", "soft", "strict")

# (correct, boxed) -> reward, per scoring mode: ROLL's table.
REWARD_TABLE: dict[str, dict[tuple[bool, bool], float]] = {
    "loose": {(True, True): 1.0, (True, False): 1.0, (False, True): -1.0, (False, False): -1.0},
    "soft": {(True, True): 1.0, (True, False): 0.5, (False, True): -0.5, (False, False): -1.0},
    "strict": {(True, True): 1.0, (True, False): -1.0, (False, True): -1.0, (False, False): -1.0},
}

_BOXED = re.compile(r"\\boxed\{([^}]+)\}")


def extract_choice(answer_text: str) -> tuple[str, bool]:
    """(the text holding the chosen letter, whether it came from a `\\boxed{}`)."""
    boxed = _BOXED.findall(answer_text)
    if boxed:
        return boxed[-1], True
    index = answer_text.lower().rfind("answer is")
    return (answer_text if index < 0 else answer_text[index + len("answer is"):]), False


def choice_is_correct(extracted: str, reference: str) -> bool:
    """The first upper-case character of `extracted` is the reference's first character."""
    first_upper = next((ch for ch in extracted if ch.isupper()), None)
    return first_upper is not None and reference[:1] == first_upper


def crossthinkqa_score(response: str, reference: str, *, scoring_mode: str = "soft", repetition_ngram_size: int = 3,
                       repetition_max_penalty: float = -0.5) -> float:
    if scoring_mode not in REWARD_TABLE:
        raise ValueError(f"scoring_mode: {scoring_mode!r}; valid for crossthinkqa_rule: {', '.join(SCORING_MODES)}")
    text = strip_special_tokens(response)
    extracted, boxed = extract_choice(after_last_think(text))
    reward = REWARD_TABLE[scoring_mode][(choice_is_correct(extracted, reference.strip()), boxed)]
    return reward + repetition_penalty(text, repetition_ngram_size, repetition_max_penalty)


def crossthinkqa_rule_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                             *, scoring_mode: str = "soft", repetition_ngram_size: int = 3,
                             repetition_max_penalty: float = -0.5) -> list[float]:
    """ROLL's CrossThinkQA reward of each response against its sample's answer letter (`samples[i]["answer"]`);
    `scoring_mode` is the section's (ROLL's `reward_type: soft`; unset means soft, what every ROLL example sets)."""
    scores = []
    for i, (response, sample) in enumerate(zip(responses, samples, strict=True)):
        reference = sample.get("answer")
        if not reference or not str(reference).strip():
            raise ValueError(f"samples[{i}].answer: missing; the crossthinkqa_rule reward needs the answer letter "
                             "(set data_args.response to ROLL's ground_truth column)")
        scores.append(crossthinkqa_score(response, str(reference), scoring_mode=scoring_mode,
                                         repetition_ngram_size=repetition_ngram_size,
                                         repetition_max_penalty=repetition_max_penalty))
    return scores
