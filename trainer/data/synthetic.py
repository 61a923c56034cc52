"""Synthetic verifiable tasks generated in code, for CPU demos and tests.

Each task gives `make_prompts(n, seed) -> [{"prompt", "answer", "task"}]` (deterministic in seed)
and `score(response, answer) -> float in [0, 1]`. Prompts are plain text ending in a newline; the
answer is a few characters, so responses are a few tokens with the byte-level tiny tokenizer.

Scores are dense partial credit (`char_match_score`), so a randomly initialised model already earns
some reward and GRPO gets a gradient from step one (r = response with whitespace stripped, t = answer,
w = LENGTH_WEIGHT = 0.2):

    score(r, t) = (1 - w) * #{i : r_i = t_i} / max(|t|, |r|)  +  w * min(|t|, |r|) / max(|t|, |r|)

The length term rewards stopping at the right place from the start (an untrained model rarely samples
the end-of-sequence token, and without it would learn the letters long before it learns to stop);
1.0 only for an exact answer.

Chance level: a uniform policy over the tiny model's 259 tokens matches a character with p ≈ 1/259,
so an untrained model earns almost only the length term: ≈ w * |t| / response_length (≈ 0.1 for a
3-letter answer and response_length 6). A policy that has learned the output alphabet (k letters or
10 digits) and the length scores ≈ w + (1 - w) / k (0.36 for k = 5). Reaching ≥ 0.9 needs the actual
mapping from prompt to answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LETTERS = "abcde"  # small alphabet: learnable from scratch by RL alone within minutes on CPU
LENGTH_WEIGHT = 0.2


def char_match_score(response: str, answer: str, length_weight: float = LENGTH_WEIGHT) -> float:
    """(1 - w) * #{i : r_i = t_i} / max(|t|, |r|) + w * min(|t|, |r|) / max(|t|, |r|), r stripped."""
    r = response.strip()
    if r == answer:
        return 1.0
    longest = max(len(answer), len(r))
    matches = sum(a == b for a, b in zip(r, answer, strict=False))
    return (1 - length_weight) * matches / longest + length_weight * min(len(answer), len(r)) / longest


@dataclass(frozen=True)
class SyntheticTask:
    name: str
    description: str
    make_example: Callable[..., tuple[str, str]]  # (rng, **kwargs) -> (prompt, answer)
    score: Callable[[str, str], float] = char_match_score

    def make_prompts(self, n: int, seed: int = 0, **kwargs: Any) -> list[dict[str, str]]:
        """`n` examples, identical for the same seed and kwargs (`data_args.synthetic.kwargs`)."""
        if n < 0:
            raise ValueError(f"synthetic.num_prompts: must be >= 0, got {n}")
        rng = random.Random(f"{self.name}:{seed}")
        examples = []
        for _ in range(n):
            try:
                prompt, answer = self.make_example(rng, **kwargs)
            except TypeError as exc:
                raise ValueError(f"synthetic.kwargs: {exc} (task {self.name!r})") from None
            examples.append({"prompt": prompt, "answer": answer, "task": self.name})
        return examples


def _letters(rng: random.Random, length: int, alphabet: str) -> str:
    if length < 1 or not alphabet:
        raise ValueError(f"synthetic.kwargs: length must be >= 1 and alphabet non-empty (got {length}, {alphabet!r})")
    return "".join(rng.choice(alphabet) for _ in range(length))


def _copy(rng: random.Random, length: int = 3, alphabet: str = LETTERS) -> tuple[str, str]:
    word = _letters(rng, length, alphabet)
    return f"copy {word}\n", word


def _reverse(rng: random.Random, length: int = 3, alphabet: str = LETTERS) -> tuple[str, str]:
    word = _letters(rng, length, alphabet)
    return f"reverse {word}\n", word[::-1]


def _add(rng: random.Random, max_value: int = 9) -> tuple[str, str]:
    a, b = rng.randint(0, max_value), rng.randint(0, max_value)
    return f"add {a}+{b}\n", str(a + b)


TASKS: dict[str, SyntheticTask] = {
    "copy": SyntheticTask("copy", "repeat a fixed-length word of letters a-e (kwargs: length, alphabet)", _copy),
    "reverse": SyntheticTask("reverse", "reverse a fixed-length word of letters a-e (kwargs: length, alphabet)",
                             _reverse),
    "add": SyntheticTask("add", "sum of two numbers 0..max_value (kwargs: max_value, default 9)", _add),
}


def get_task(name: str) -> SyntheticTask:
    if name not in TASKS:
        raise ValueError(f"task: unknown synthetic task {name!r}; valid: {', '.join(sorted(TASKS))}")
    return TASKS[name]
