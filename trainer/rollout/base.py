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
    ``repetition_penalty`` (vLLM's and HF's rule): a logit of a token already in the prompt or the
    response is divided by the penalty when positive and multiplied by it when negative.
    ``min_new_tokens``: EOS and the stop tokens are masked (and stop strings not checked) before
    that many tokens. ``stop_strings`` end a response at the token that completes one of them (the
    token is kept). ``ignore_eos``: EOS does not end a response (stop tokens and strings still do).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    n: int = 1
    stop_token_ids: Sequence[int] = field(default_factory=tuple)
    stop_strings: Sequence[str] = field(default_factory=tuple)
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
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
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(f"min_new_tokens must be in [0, max_new_tokens={self.max_new_tokens}], "
                             f"got {self.min_new_tokens}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 = none), got {self.repetition_penalty}")
        if any(not s for s in self.stop_strings):
            raise ValueError("stop_strings must not contain an empty string")


@dataclass
class Generation:
    """One sampled response.

    ``logprobs[i]`` is ``log softmax(logits / temperature)[token_ids[i]]``: the temperature-scaled
    distribution *before* top-k / top-p / min-p truncation, repetition penalty and min-tokens masking
    (plain ``log softmax(logits)`` when greedy). This is the same quantity the actor recomputes for
    PPO ratios, so the two can be compared directly. (``vllm`` reports the distribution it sampled
    from: equal to this without truncation, penalty or masking; see trainer.rollout.vllm.)
    ``token_ids`` end with the EOS or stop token that ended the response, when one did.
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

    def shutdown(self) -> None: ...
