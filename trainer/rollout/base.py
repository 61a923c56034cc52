"""The rollout-engine interface (vLLM-shaped) shared by every generation backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from torch import Tensor

STOP_REASONS = ("eos", "length", "stop")


@dataclass
class SamplingParams:
    """Per-call sampling settings; names and meaning follow vLLM's ``SamplingParams``.

    ``temperature == 0`` means greedy decoding. ``top_k <= 0`` disables top-k. ``seed`` makes one
    call reproducible: the same prompts, weights and seed give the same tokens.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    n: int = 1
    stop_token_ids: Sequence[int] = field(default_factory=tuple)
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclass
class Generation:
    """One sampled response.

    ``logprobs[i]`` is ``log softmax(logits / temperature)[token_ids[i]]``: the temperature-scaled
    distribution *before* top-k / top-p / min-p truncation (plain ``log softmax(logits)`` when
    greedy). This is the same quantity the actor recomputes for PPO ratios, so the two can be
    compared directly.
    """

    prompt_index: int
    sample_index: int
    token_ids: list[int]
    logprobs: list[float]
    stop_reason: str  # "eos" | "length" | "stop"


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...

    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None: ...

    def sleep(self) -> None: ...

    def wake(self) -> None: ...
