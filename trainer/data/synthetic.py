"""Synthetic verifiable tasks generated in code, for CPU demos and tests.

Each task gives `make_prompts(n, seed) -> [{"prompt", "answer", "task"}]` (deterministic in seed)
and `score(response, answer) -> float in [0, 1]`. Prompts are plain text ending in a newline; the
answer is a few characters, so responses are a few tokens with the byte-level tiny tokenizer.

Scores are dense partial credit (`char_match_score`), so a randomly initialised model already earns
some reward and GRPO gets a gradient from step one:

    score(r, t) = #{i : r_i = t_i} / max(|t|, |r|)        (r = response with whitespace stripped)

Chance level: a uniform policy over the tiny model's 259 tokens matches a target character with
p ≈ 1/259, so an untrained model scores ≈ 0.004-0.01 (extra characters count against it). A policy
that has only learned the output alphabet (k letters or 10 digits) scores ≈ 1/k. Reaching ≥ 0.9
needs the actual mapping from prompt to answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

LETTERS = "abcde"  # small alphabet: learnable from scratch by RL alone within minutes on CPU


def char_match_score(response: str, answer: str) -> float:
    """#{i : r_i = t_i} / max(|t|, |r|) on the whitespace-stripped response; 1.0 only for an exact match."""
    r = response.strip()
    if not answer:
        return float(r == "")
    matches = sum(a == b for a, b in zip(r, answer, strict=False))
    return matches / max(len(answer), len(r))


@dataclass(frozen=True)
class SyntheticTask:
    name: str
    description: str
    make_example: Callable[[random.Random], tuple[str, str]]  # rng -> (prompt, answer)
    score: Callable[[str, str], float] = char_match_score

    def make_prompts(self, n: int, seed: int = 0) -> list[dict[str, str]]:
        """`n` examples, identical for the same seed (per-task stream, independent of other tasks)."""
        if n < 0:
            raise ValueError(f"n: must be >= 0, got {n}")
        rng = random.Random(f"{self.name}:{seed}")
        examples = []
        for _ in range(n):
            prompt, answer = self.make_example(rng)
            examples.append({"prompt": prompt, "answer": answer, "task": self.name})
        return examples


def _letters(rng: random.Random, min_len: int = 2, max_len: int = 3) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(min_len, max_len)))


def _reverse(rng: random.Random) -> tuple[str, str]:
    word = _letters(rng)
    return f"reverse {word}\n", word[::-1]


def _copy(rng: random.Random) -> tuple[str, str]:
    word = _letters(rng)
    return f"copy {word}\n", word


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return f"add {a}+{b}\n", str(a + b)


TASKS: dict[str, SyntheticTask] = {
    "copy": SyntheticTask("copy", "repeat 2-3 letters from a-e", _copy),
    "reverse": SyntheticTask("reverse", "reverse 2-3 letters from a-e", _reverse),
    "add": SyntheticTask("add", "sum of two digits 0-9", _add),
}


def get_task(name: str) -> SyntheticTask:
    if name not in TASKS:
        raise ValueError(f"task: unknown synthetic task {name!r}; valid: {', '.join(sorted(TASKS))}")
    return TASKS[name]
