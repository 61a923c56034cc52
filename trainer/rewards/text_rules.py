"""Text helpers ROLL's rule reward workers share (IFEval, CrossThinkQA): the answer after the reasoning, and
the n-gram repetition penalty.

From ROLL's roll/pipeline/rlvr/rewards/{ifeval,crossthinkqa}_rule_reward_worker.py, whose penalty is
demystify-long-cot's (openrlhf/reward/repetition.py).
"""

from __future__ import annotations

# ROLL decodes with special tokens kept and strips these three before scoring.
SPECIAL_TOKENS = ("<|endoftext|>", "<pad>", "<|im_end|>")


def strip_special_tokens(text: str) -> str:
    for token in SPECIAL_TOKENS:
        text = text.replace(token, "")
    return text


def after_last_think(text: str, end_think: str = "</think>") -> str:
    """The text after the last `</think>`, leading newlines removed; the whole text when there is none."""
    index = text.rfind(end_think)
    if index < 0:
        return text
    return text[index + len(end_think):].lstrip("\n")


def repetition_penalty(text: str, ngram_size: int = 3, max_penalty: float = -0.5) -> float:
    """`max_penalty · (1 − distinct n-grams / n-grams)` over the lower-cased whitespace words; 0.0 for a text of
    fewer than `ngram_size` words. A text that repeats one n-gram throughout nears `max_penalty`."""
    if max_penalty > 0:
        raise ValueError(f"repetition_max_penalty: {max_penalty} must be <= 0 (it is a penalty)")
    if ngram_size < 1:
        raise ValueError(f"repetition_ngram_size: {ngram_size} must be >= 1")
    words = text.lower().split()
    if len(words) < ngram_size:
        return 0.0
    ngrams = list(zip(*[words[i:] for i in range(ngram_size)], strict=False))
    return (1 - len(set(ngrams)) / len(ngrams)) * max_penalty
