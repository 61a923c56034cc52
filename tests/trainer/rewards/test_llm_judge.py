"""ROLL's LLM-as-judge reward (issue 36, decision 0039): its prompts, ROLL's score parsing, and the `api` judge
against a real local OpenAI-compatible server (tests/trainer/rewards/judge_server.py): what it receives
(prompt, model name, key), retries, and the clear failures of a server that refuses, errs or hangs."""

from __future__ import annotations

import time

import pytest

from tests.trainer.rewards.judge_server import judge_server, roll_score
from trainer.config.outbound import ALLOW_VAR
from trainer.config.registries import JUDGE_PROMPTS as JUDGE_PROMPT_NAMES
from trainer.rewards.llm_judge import (
    JUDGE_PROMPTS,
    JudgeApiError,
    judge_messages,
    parse_judge_score,
    question_text,
)
from trainer.rewards.registry import RewardFn, build_reward

KEY = "sk-test-0123456789"
CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"


def api_reward(url: str, **options: object) -> RewardFn:
    settings = {"judge_model_type": "api", "judge_api_url": url, "judge_model_name": "judge-7b",
                "judge_api_key": KEY, "retry_wait_s": 0.0, **options}
    return build_reward("llm_judge", **settings)


def test_prompt_names_equal_the_config_registry() -> None:
    assert tuple(JUDGE_PROMPTS) == JUDGE_PROMPT_NAMES


@pytest.mark.parametrize(("reply", "score"), [
    # ROLL's _parse_score: the first "Score: s", s/10 when s > 1, clamped to [0, 1]; else yes -> 1, no -> 0
    ("Score: 7", 0.7),
    ("The answer is fine.\nscore: 8.5", 0.85),
    ("Score:10", 1.0),
    ("Score: 0.25", 0.25),
    ("Score: 1", 1.0),  # ROLL reads a score <= 1 as already in [0, 1]
    ("Score: 42", 1.0),
    ("Score: 3 (earlier: Score: 9)", 0.3),
    ("YES", 1.0),
    ("No.", 0.0),
    ("yes, not no", 1.0),
    ("I cannot judge this.", None),
    ("I know the eyes", None),  # whole words only (ROLL's substrings would read "know" as a no)
    ("", None),
])
def test_roll_score_parsing(reply: str, score: float | None) -> None:
    assert parse_judge_score(reply) == (None if score is None else pytest.approx(score))


def test_question_is_the_last_user_turn() -> None:
    assert question_text(CHATML.format(q="What is 2+2?")) == "What is 2+2?"
    assert question_text("system\nBe brief.\nuser\nWhat is 3+3?") == "What is 3+3?"  # ROLL's cut
    assert question_text("copy bad\n") == "copy bad"


def test_each_prompt_holds_the_question_the_response_and_the_reference() -> None:
    for name in JUDGE_PROMPTS:
        text = judge_messages(name, "Q-{text}", "R-text", "REF-text")[0]["content"]
        assert all(part in text for part in ("Q-{text}", "R-text", "REF-text")), name
    assert "Score: <number>" in judge_messages(None, "q", "r", None)[0]["content"]
    assert "(none)" in judge_messages("score-0-10", "q", "r", None)[0]["content"]
    with pytest.raises(ValueError, match=r"samples\[3\]\.answer: missing; the judge prompt Qwen2.5-7B-Instruct"):
        judge_messages("Qwen2.5-7B-Instruct-RLVR-prompt", "q", "r", None, 3)


def test_api_judge_scores_from_what_the_server_received() -> None:
    prompts = [CHATML.format(q="What is 2+2?"), CHATML.format(q="Name a color."), "copy bad\n"]
    responses = ["4", "blue, or maybe green", ""]
    samples = [{"answer": "4"}, {"answer": None}, {"answer": "bad"}]
    with judge_server() as server:
        scores = api_reward(server.base_url)(prompts, responses, samples)
    assert scores == [pytest.approx(roll_score(len(r) % 11)) for r in responses]  # k = 1, 9, 0: 1.0, 0.9, 0.0
    assert len(server.received) == 3
    for record in server.received:
        assert record["path"] == "/v1/chat/completions"
        assert record["request"]["model"] == "judge-7b"
        assert record["authorization"] == f"Bearer {KEY}"
        assert set(record["request"]) == {"model", "messages"}  # ROLL sends nothing else by default
        assert [m["role"] for m in record["request"]["messages"]] == ["user"]
    contents = "\n".join(r["content"] for r in server.received)
    for part in ("<prompt>\nWhat is 2+2?\n</prompt>", "<response>\nblue, or maybe green\n</response>",
                 "<reference>\n4\n</reference>", "<prompt>\ncopy bad\n</prompt>", "<reference>\n(none)\n</reference>"):
        assert part in contents


def test_judge_prompt_selects_what_the_judge_reads() -> None:
    responses, samples = ["4", "5"], [{"answer": "4"}, {"answer": "4"}]
    with judge_server() as server:
        match = api_reward(server.base_url, judge_prompt="Qwen2.5-7B-Instruct-RLVR-prompt")
        assert match(["q", "q"], responses, samples) == [1.0, 0.0]
        assert all("Reply with YES or NO only" in r["content"] for r in server.received)
        server.received.clear()
        scored = api_reward(server.base_url, judge_prompt="score-0-10")
        assert scored(["q", "q"], responses, samples) == [1.0, 1.0]  # "Score: 1" twice (len 1 % 11)
        assert all("Score: <number>" in r["content"] for r in server.received)


def test_sampling_options_and_no_key_reach_the_request() -> None:
    with judge_server() as server:
        reward = api_reward(server.base_url + "/", judge_api_key=None, temperature=0.0, max_tokens=16)
        reward(["q"], ["ab"], [{"answer": "x"}])
    (record,) = server.received
    assert record["authorization"] is None
    assert record["request"]["temperature"] == 0.0 and record["request"]["max_tokens"] == 16


def test_transient_failures_are_retried() -> None:
    with judge_server() as server:
        server.plan = [("status", 503), ("empty",), ("status", 429)]
        assert api_reward(server.base_url, tries=4)(["q"], ["abc"], [{"answer": "x"}]) == [pytest.approx(0.3)]
    assert len(server.received) == 4


def test_a_server_that_keeps_failing_names_the_url_and_status_never_the_key() -> None:
    with judge_server() as server:
        server.plan = [("status", 502)] * 3
        with pytest.raises(JudgeApiError) as failed:
            api_reward(server.base_url)(["q"], ["r"], [{"answer": "x"}])
    message = str(failed.value)
    assert f"judge_api_url {server.base_url}/chat/completions: no judgment after 3 tries" in message
    # the status and its standard phrase; never the body (it echoes the key, as a careless server's may)
    assert message.endswith("last: HTTP 502 Bad Gateway") and KEY not in message and "you sent" not in message
    assert len(server.received) == 3


def test_a_refused_key_fails_at_once() -> None:
    with judge_server() as server:
        server.plan = [("status", 401)]
        with pytest.raises(JudgeApiError, match=r"/v1/chat/completions: HTTP 401") as failed:
            api_reward(server.base_url)(["q"], ["r"], [{"answer": "x"}])
    assert KEY not in str(failed.value) and len(server.received) == 1


def test_a_server_that_hangs_times_out() -> None:
    with judge_server() as server:
        server.plan = [("sleep", 3.0)] * 2
        started = time.perf_counter()
        with pytest.raises(JudgeApiError, match=r"no judgment after 2 tries; last: no answer .*timeout 0.3 s"):
            api_reward(server.base_url, timeout_s=0.3, tries=2)(["q"], ["r"], [{"answer": "x"}])
        assert time.perf_counter() - started < 2.0


def test_nothing_listening_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    with judge_server() as server:
        url = server.base_url
    monkeypatch.setenv(ALLOW_VAR, url)
    with pytest.raises(JudgeApiError, match=rf"judge_api_url {url}/chat/completions: no judgment after 1 tries"):
        api_reward(url, tries=1)(["q"], ["r"], [{"answer": "x"}])


def test_unparsed_judgments_score_zero() -> None:
    replies = ["I cannot judge this.", "Score: 6", "no"]
    reward = build_reward("llm_judge", judge_model_type="inference", generate=lambda convs: replies[: len(convs)])
    assert reward(["q"] * 3, ["a", "b", "c"], [{}] * 3) == [0.0, pytest.approx(0.6), 0.0]


@pytest.mark.parametrize(("options", "error"), [
    ({"judge_model_type": "api", "judge_model_name": "m"}, "judge_api_url / judge_model_name: judge_model_type api"),
    ({"judge_model_type": "api", "judge_api_url": "ftp://x", "judge_model_name": "m"}, "judge_api_url: 'ftp://x'"),
    ({"judge_model_type": "inference"}, "judge_model_type: inference needs the section's model"),
    ({"judge_model_type": None}, "judge_model_type: None; valid: api, inference"),
    ({"judge_model_type": "api", "judge_api_url": "http://x", "judge_model_name": "m", "judge_prompt": "mine"},
     "judge_prompt: unknown prompt 'mine'; valid: score-0-10, Qwen2.5-7B-Instruct-RLVR-prompt"),
    ({"judge_model_type": "api", "judge_api_url": "http://x", "judge_model_name": "m", "tries": 0},
     "reward_kwargs.tries: 0; valid: an integer >= 1"),
    ({"judge_model_type": "api", "judge_api_url": "http://x", "judge_model_name": "m", "retries": 2},
     "reward_kwargs.retries: not an option of the llm_judge reward"),
])
def test_bad_options_are_refused_when_the_reward_is_built(options: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        build_reward("llm_judge", **options)
