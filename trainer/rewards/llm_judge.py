"""ROLL's LLM-as-judge reward: another language model reads the question, the response and the reference
answer, and its reply is parsed into a score in [0, 1].

The judge prompt is a named template (`JUDGE_PROMPTS`, the names of trainer.config.registries.JUDGE_PROMPTS)
with `{question}`, `{response}` and `{reference}` filled in, sent as one user message, as ROLL's
LLMJudgeRewardWorker sends it:

- `score-0-10` (ROLL's prompt when judge_prompt is unset): rate the response from 0 to 10, written as
  `Score: <number>`;
- `Qwen2.5-7B-Instruct-RLVR-prompt` (ROLL's prompt_maps name): YES when the solution's final answer matches
  the reference answer, else NO.

The question is the last user turn of the rendered prompt (ChatML), else the text after the last `user\\n`
(ROLL's cut of its decoded prompt), else the whole prompt; the reference is the sample's `answer`.

Score of a judgment (ROLL's `_parse_score`), `parse_judge_score`:

    "Score: s" (first occurrence, any case)  ->  clamp(s / 10 if s > 1 else s, 0, 1)
    else a word "yes"                         ->  1.0
    else a word "no"                          ->  0.0
    else                                      ->  None (scored 0.0 and counted, as ROLL scores it)

Two ways to get the judgment (`judge_model_type`): `api` POSTs `{model, messages}` to an OpenAI-compatible
`<judge_api_url>/chat/completions` (through trainer.config.outbound's policy, `Authorization: Bearer
<judge_api_key>` when a key is set) and reads `choices[0].message.content`; `inference` hands the conversations to a local generator built
by the reward role from the section's own model (trainer.roles.reward); `cluster` to the reward_model worker group
(trainer.roles.judge_server), ROLL's shared judge. The key never appears in a message,
a log line or an error: error texts that could echo it are redacted.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trainer.config.outbound import (
    OutboundFailed,
    OutboundRefused,
    Resolver,
    post_json,
    precheck,
    system_resolver,
)
from trainer.config.secrets import resolve_secrets

logger = logging.getLogger(__name__)

Messages = list[dict[str, str]]
Generate = Callable[[list[Messages]], list[str]]  # conversations -> the judge's reply to each


@dataclass(frozen=True)
class JudgePrompt:
    text: str  # str.format template over question, response, reference
    needs_reference: bool


SCORE_0_10 = """\
You are an expert judge. Rate how well the response answers the prompt.

<prompt>
{question}
</prompt>

<response>
{response}
</response>

<reference>
{reference}
</reference>

Weigh correctness, completeness, clarity and relevance to the prompt; the reference, when one is given, is a
correct answer. Rate the response with one number from 0 to 10 and write it in exactly this form:
Score: <number>"""

MATCH_REFERENCE = """\
Decide whether the final answer of the solution below matches the reference answer.
The reference answer may be an option letter (A, B, C, D), a number, an expression, or a list of answers when
the problem has several questions. It may be written in any language; your decision must not depend on it.

- Compare only the final answer of the solution with the reference answer.
- If they match exactly, answer YES; if they do not, answer NO.
- If the solution is unclear, incomplete or ambiguous, count it as wrong and answer NO.

Reply with YES or NO only: no other words, punctuation or explanation.

<question>
{question}
</question>

<solution>
{response}
</solution>

<reference>
{reference}
</reference>"""

JUDGE_PROMPTS: dict[str, JudgePrompt] = {
    "score-0-10": JudgePrompt(SCORE_0_10, needs_reference=False),
    "Qwen2.5-7B-Instruct-RLVR-prompt": JudgePrompt(MATCH_REFERENCE, needs_reference=True),
}
DEFAULT_PROMPT = "score-0-10"

_SCORE_RE = re.compile(r"score:\s*([0-9]+(?:\.[0-9]+)?)", re.IGNORECASE)
_YES_RE = re.compile(r"\byes\b", re.IGNORECASE)
_NO_RE = re.compile(r"\bno\b", re.IGNORECASE)
_CHATML_USER_RE = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)


# -- prompts and verdicts ------------------------------------------------------------------------
def parse_judge_score(text: str) -> float | None:
    """The judge's reply as a score in [0, 1], ROLL's `_parse_score`:

        s = the number after the first "Score:" (any case)  ->  min(max(s / 10 if s > 1 else s, 0), 1)
        else the word "yes" anywhere                          ->  1.0
        else the word "no" anywhere                           ->  0.0
        else                                                  ->  None (no score, no verdict)

    ROLL matches yes / no as substrings ("eyes" is a yes, "know" a no); here they are whole words."""
    match = _SCORE_RE.search(text)
    if match:
        score = float(match.group(1))
        if score > 1.0:
            score /= 10.0
        return min(max(score, 0.0), 1.0)
    if _YES_RE.search(text):
        return 1.0
    if _NO_RE.search(text):
        return 0.0
    return None


def question_text(prompt: str) -> str:
    """The question inside a rendered prompt: the last ChatML user turn, else the text after the last
    `user\\n` (ROLL's cut), else the prompt itself."""
    turns = _CHATML_USER_RE.findall(prompt)
    if turns:
        return turns[-1].strip()
    if "user\n" in prompt:
        return prompt.split("user\n")[-1].strip()
    return prompt.strip()


def judge_messages(prompt_name: str | None, question: str, response: str, reference: str | None,
                   index: int = 0) -> Messages:
    """The one user message the judge reads for a sample."""
    name = prompt_name or DEFAULT_PROMPT
    if name not in JUDGE_PROMPTS:
        raise ValueError(f"judge_prompt: unknown prompt {name!r}; valid: {', '.join(JUDGE_PROMPTS)}")
    template = JUDGE_PROMPTS[name]
    if reference is None and template.needs_reference:
        raise ValueError(f"samples[{index}].answer: missing; the judge prompt {name} compares the response with a "
                         "reference answer (set data_args.response to the answer column)")
    text = template.text.format(question=question, response=response,
                                reference="(none)" if reference is None else reference)
    return [{"role": "user", "content": text}]


# -- the API -------------------------------------------------------------------------------------
class JudgeApiError(RuntimeError):
    """The judge API gave no judgment: the message names the URL and the last status."""


def chat_completions_url(base_url: str) -> str:
    """`<base>/chat/completions`, as an OpenAI client with base_url=<base> calls it."""
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else f"{base}/chat/completions"


def _redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "<judge_api_key>") if secret else text


def _reply_content(answer: Any) -> str | None:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def call_judge_api(url: str, model: str, messages: Messages, *, api_key: str | None, timeout_s: float,
                   tries: int, retry_wait_s: float, extra: dict[str, Any] | None = None,
                   resolver: Resolver = system_resolver) -> str:
    """The judge's reply to one conversation from an OpenAI-compatible chat-completions endpoint.

    Each request goes through the outbound policy (trainer.config.outbound: checked again and connected to the
    checked address); a URL it refuses fails at once, never retried. Retried (up to `tries` requests, waiting
    retry_wait_s × attempt between them): no connection, a timeout, HTTP 408 / 429 / 5xx, a reply that is not
    JSON or holds no content (ROLL retries an empty reply). Any other HTTP error (a bad key, an unknown model)
    fails at once. Raises JudgeApiError naming the URL and the last status, never what the server wrote."""
    endpoint = chat_completions_url(url)
    body = {"model": model, "messages": messages, **(extra or {})}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    last = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(retry_wait_s * attempt)
        try:
            answer = post_json(endpoint, body, "judge_api_url", timeout_s=timeout_s, headers=headers,
                               resolver=resolver)
        except OutboundRefused as exc:
            raise JudgeApiError(str(exc)) from None
        except OutboundFailed as exc:
            last = _redact(str(exc), api_key)
            if exc.status is None or exc.status in (408, 429) or exc.status >= 500:
                continue
            raise JudgeApiError(f"judge_api_url {endpoint}: {last}") from None
        except ValueError:  # the body is not JSON: not quoted, it may hold anything
            last = "HTTP 200 with a body that is not JSON"
            continue
        content = _reply_content(answer)
        if content:
            return content
        last = "HTTP 200 without choices[0].message.content"
    raise JudgeApiError(f"judge_api_url {endpoint}: no judgment after {tries} tries; last: {last}")


# -- the reward ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMJudgeOptions:
    """The reward's settings. From the reward section (ROLL's keys): judge_prompt, judge_model_type,
    judge_model_name, judge_api_url, judge_api_key, and for `inference` / `cluster` the judge's `generate`
    (built by trainer.roles.reward). From `reward_kwargs` (PolicyLab's; ROLL fixes them in code):
    `timeout_s` (per request), `tries` (requests per judgment; ROLL's 3), `retry_wait_s`, `concurrency`
    (judgments requested at once; ROLL asks one at a time), `temperature` / `max_tokens` (sent with each
    request when set; ROLL sends neither)."""

    judge_prompt: str | None = None
    judge_model_type: str | None = None
    judge_model_name: str | None = None
    judge_api_url: str | None = None
    judge_api_key: str | None = field(default=None, repr=False)
    generate: Generate | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    tries: int = 3
    retry_wait_s: float = 1.0
    concurrency: int = 8
    temperature: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.judge_prompt is not None and self.judge_prompt not in JUDGE_PROMPTS:
            raise ValueError(f"judge_prompt: unknown prompt {self.judge_prompt!r}; valid: {', '.join(JUDGE_PROMPTS)}")
        if self.judge_model_type == "api":
            if not self.judge_api_url or not self.judge_model_name:
                raise ValueError("judge_api_url / judge_model_name: judge_model_type api needs both (the API's base "
                                 "URL and the model name to send)")
            precheck(self.judge_api_url, "judge_api_url")  # and again before each request
        elif self.judge_model_type == "inference":
            if self.generate is None:
                raise ValueError("judge_model_type: inference needs the section's model (model_args.model_name_or_path)")
        elif self.judge_model_type == "cluster":
            if self.generate is None:
                raise ValueError("judge_model_type: cluster needs the reward_model group (a top-level reward_model)")
        else:
            raise ValueError(f"judge_model_type: {self.judge_model_type!r}; valid: api, inference, cluster")
        checks = {"timeout_s": self.timeout_s > 0, "tries": self.tries >= 1, "retry_wait_s": self.retry_wait_s >= 0,
                  "concurrency": self.concurrency >= 1,
                  "temperature": self.temperature is None or self.temperature >= 0,
                  "max_tokens": self.max_tokens is None or self.max_tokens >= 1}
        valid = {"timeout_s": "a number > 0", "tries": "an integer >= 1", "retry_wait_s": "a number >= 0",
                 "concurrency": "an integer >= 1", "temperature": "a number >= 0", "max_tokens": "an integer >= 1"}
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"reward_kwargs.{name}: {getattr(self, name)!r}; valid: {valid[name]}")

    def judge(self) -> Generate:
        """conversations -> replies, through the API (`concurrency` at once) or the local model."""
        if self.judge_model_type in ("inference", "cluster"):
            assert self.generate is not None
            return self.generate
        extra = {k: v for k, v in (("temperature", self.temperature), ("max_tokens", self.max_tokens)) if v is not None}
        api_key = resolve_secrets(self.judge_api_key)  # `${secret:NAME}`: the team secret, only here

        def ask(messages: Messages) -> str:
            return call_judge_api(str(self.judge_api_url), str(self.judge_model_name), messages,
                                  api_key=api_key, timeout_s=self.timeout_s, tries=self.tries,
                                  retry_wait_s=self.retry_wait_s, extra=extra)

        def generate(conversations: list[Messages]) -> list[str]:
            if not conversations:
                return []
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations))) as pool:
                return list(pool.map(ask, conversations))

        return generate


def llm_judge_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                     **options: Any) -> list[float]:
    """The judge's score of each response in [0, 1] (module docstring); a reply without a score or verdict
    scores 0.0, as in ROLL, and is counted in a warning."""
    opts = LLMJudgeOptions(**options)
    conversations = [
        judge_messages(opts.judge_prompt, question_text(prompt), response,
                       None if sample.get("answer") is None else str(sample["answer"]), i)
        for i, (prompt, response, sample) in enumerate(zip(prompts, responses, samples, strict=True))
    ]
    replies = opts.judge()(conversations)
    if len(replies) != len(conversations):
        raise RuntimeError(f"llm_judge: {len(replies)} judgments for {len(conversations)} samples")
    scores = [parse_judge_score(reply) for reply in replies]
    unparsed = [i for i, s in enumerate(scores) if s is None]
    if unparsed:
        logger.warning("llm_judge: %d of %d judgments hold no `Score:` and no yes/no verdict, scored 0.0 "
                       "(first: %r)", len(unparsed), len(replies), replies[unparsed[0]][:200])
    return [0.0 if s is None else s for s in scores]
