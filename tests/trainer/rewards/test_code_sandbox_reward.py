"""The code_sandbox reward (ROLL's CodeSandboxRewardWorker): its test-case formats, pass/fail score,
concurrency, the code_url client and the validation of its settings.

The cases follow ROLL's docs (docs/…/code_sandbox_reward_worker.md): input (stdin/expected_stdout, or a
call-based test_case_function), assert, pytest, check_based and text. Expected scores are ROLL's rule:
all cases pass = 1, else 0 locally and -1 through code_url.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.trainer.config.config_testing import changed
from trainer.config import PipelineConfig, validate_config
from trainer.config.outbound import ALLOW_VAR
from trainer.rewards.code_sandbox import extract_code, outputs_match
from trainer.rewards.registry import build_reward
from trainer.roles.reward import build_reward_fn

CODE_SANDBOX_CLS = "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker"
REVERSE_OK = "Here:\n```python\nprint(input()[::-1])\n```"
REVERSE_WRONG = "```python\nprint(input())\n```"
STDIN_CASES = json.dumps([{"stdin": "abc", "expected_stdout": "cba"}, {"stdin": "xy\n", "expected_stdout": "yx\n"}])


def fenced(code: str) -> str:
    return f"<think>plan</think>\n```python\n{code}\n```"


def score(responses: list[str], samples: list[dict[str, Any]], **options: Any) -> list[float]:
    reward = build_reward("code_sandbox", timeout_s=5.0, **options)
    return reward(["p"] * len(responses), responses, samples)


def test_extract_code_takes_the_last_block_after_thinking() -> None:
    text = "<think>```python\nprint(0)\n```</think>draft ```python\nprint(1)\n``` final ```\nprint(2)\n```"
    assert extract_code(text) == "print(2)"
    assert extract_code("no code here") is None
    assert outputs_match("1 2\n3.0  \n", "1 2\n3") and not outputs_match("1 2 4", "1 2 3")


def test_stdin_cases_correct_passes_and_incorrect_fails() -> None:
    sample = {"case_type": "input", "test_cases": STDIN_CASES, "test_case_function": "None"}
    assert score([REVERSE_OK, REVERSE_WRONG, "print('no fence')"], [sample] * 3) == [1.0, 0.0, 0.0]


def test_call_based_input_cases() -> None:
    tests = [{"stdin": "[1, 3, 5, 6]\n5", "expected_stdout": "2"}, {"stdin": "[1, 3, 5, 6]\n7",
                                                                    "expected_stdout": "4"}]
    sample = {"case_type": "input", "test_cases": tests, "test_case_function": "searchInsert"}
    right = fenced("class Solution:\n    def searchInsert(self, nums: List[int], target: int) -> int:\n"
                   "        return bisect_left(nums, target)")
    wrong = fenced("class Solution:\n    def searchInsert(self, nums, target):\n        return 0")
    plain = fenced("def searchInsert(nums, target):\n    return sum(n < target for n in nums)")
    assert score([right, wrong, plain], [sample] * 3) == [1.0, 0.0, 1.0]


def test_assert_pytest_check_based_and_text_cases() -> None:
    add_ok, add_bad = fenced("def add(a, b):\n    return a + b"), fenced("def add(a, b):\n    return a - b")
    assert_sample = {"case_type": "assert", "test_cases": [{"assert_code": "assert add(2, 3) == 5"},
                                                            {"assert_code": "assert add(-1, 1) == 0"}]}
    pytest_sample = {"case_type": "pytest", "test_cases": {
        "assert_code": "\n\ndef test_small():\n    assert add(1, 2) == 3\n\ndef test_zero():\n    assert add(0, 0) == 0\n"}}
    check_sample = {"case_type": "check_based", "test_cases": json.dumps([{
        "assert_code": "def check(candidate):\n    assert candidate(a=2, b=2) == 4\n    assert candidate(a=1, b=5) == 6\n",
        "import_prefix": "import math\n", "entry_point": "Solution().add"}])}
    cls_ok = fenced("class Solution:\n    def add(self, a, b):\n        return a + b")
    cls_bad = fenced("class Solution:\n    def add(self, a, b):\n        return a * b")
    text_sample = {"case_type": "text", "test_cases": [
        {"assert_code": "import re\nassert re.search(r'<<[^>]+>>', {response})"},
        {"assert_code": "assert len({response}.split()) >= 3"}]}
    samples = [assert_sample, assert_sample, pytest_sample, pytest_sample, check_sample, check_sample,
               text_sample, text_sample]
    responses = [add_ok, add_bad, add_ok, add_bad, cls_ok, cls_bad,
                 "<think>x</think><<Title>> three words here", "<<Title>> short"]
    assert score(responses, samples) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_a_program_past_the_time_limit_scores_zero_within_the_limit() -> None:
    sample = {"case_type": "input", "test_cases": STDIN_CASES}
    started = time.monotonic()
    assert build_reward("code_sandbox", timeout_s=1.0)(["p"], [fenced("while True:\n    pass")], [sample]) == [0.0]
    assert time.monotonic() - started < 3.0


def test_samples_are_scored_concurrently() -> None:
    """Four programs that sleep past a 1 s limit: about one limit with four workers, four with one."""
    sample = {"case_type": "input", "test_cases": STDIN_CASES}
    sleeper = fenced("import time\ntime.sleep(60)")
    timings = {}
    for workers in (4, 1):
        reward = build_reward("code_sandbox", timeout_s=1.0, concurrency=workers)
        started = time.monotonic()
        assert reward(["p"] * 4, [sleeper] * 4, [sample] * 4) == [0.0] * 4
        timings[workers] = time.monotonic() - started
    assert timings[4] < 2.5 and timings[1] >= 4.0, timings


def test_data_problems_name_the_sample() -> None:
    with pytest.raises(ValueError, match=r"samples\[1\]\.test_cases: missing"):
        score([REVERSE_OK] * 2, [{"test_cases": STDIN_CASES}, {}])
    with pytest.raises(ValueError, match=r"samples\[0\]\.test_cases: empty"):
        score([REVERSE_OK], [{"test_cases": "[]"}])
    with pytest.raises(ValueError, match=r"samples\[0\]\.case_type: 'unit'; valid: input, assert"):
        score([REVERSE_OK], [{"case_type": "unit", "test_cases": STDIN_CASES}])


# -- code_url: a SandboxFusion-style service ----------------------------------------------------
class FakeSandbox(BaseHTTPRequestHandler):
    """Answers as SandboxFusion's run_code: reverses stdin when the code reverses, else echoes it;
    the first `flaky` requests get a SandboxError."""

    requests: list[dict[str, Any]] = []
    flaky = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeSandbox.requests.append(body)
        if FakeSandbox.flaky > 0:
            FakeSandbox.flaky -= 1
            answer: dict[str, Any] = {"status": "SandboxError", "message": "busy"}
        else:
            out = body["stdin"][::-1] if "[::-1]" in body["code"] else body["stdin"]
            answer = {"status": "Success", "run_result": {"status": "Finished", "stdout": out, "return_code": 0}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def sandbox_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The fake service's URL, listed in the outbound allow-list (127.0.0.1 is refused by default)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSandbox)
    FakeSandbox.requests, FakeSandbox.flaky = [], 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/run_code"
    monkeypatch.setenv(ALLOW_VAR, url)
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


def test_code_url_scores_as_roll(sandbox_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainer.rewards.code_sandbox.HTTP_RETRY_WAIT_S", 0.01)
    sample = {"case_type": "input", "test_cases": STDIN_CASES, "tag": "codeforces"}
    scores = score([REVERSE_OK, REVERSE_WRONG, "no code"], [sample] * 3, use_local=False, code_url=sandbox_url)
    assert scores == [1.0, -1.0, -1.0]
    first = next(r for r in FakeSandbox.requests if "print(input()[::-1])" in r["code"])
    assert first["language"] == "python" and first["stdin"] in ("abc", "xy\n") and first["run_timeout"] == 5.0
    assert first["expected_stdout"] == {"abc": "cba", "xy\n": "yx\n"}[first["stdin"]]
    FakeSandbox.flaky = 2  # two SandboxErrors, then an answer: retried
    assert score([REVERSE_OK], [sample], use_local=False, code_url=sandbox_url) == [1.0]
    # ROLL scores a livecodebench tag locally even with code_url
    local = {**sample, "tag": "livecodebench_v5"}
    count = len(FakeSandbox.requests)
    assert score([REVERSE_WRONG], [local], use_local=False, code_url=sandbox_url) == [0.0]
    assert len(FakeSandbox.requests) == count


def test_an_unreachable_code_url_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainer.rewards.code_sandbox.HTTP_RETRY_WAIT_S", 0.01)
    url = "http://127.0.0.1:9/run_code"  # discard port: nothing listens
    monkeypatch.setenv(ALLOW_VAR, url)
    with pytest.raises(RuntimeError, match=r"code_url http://127.0.0.1:9/run_code: the sandbox service did not "
                                           r"answer after 3 tries"):
        score([REVERSE_OK], [{"test_cases": STDIN_CASES}], use_local=False, code_url=url)


# -- settings ------------------------------------------------------------------------------------
def test_settings_are_validated_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^reward_kwargs\.timeout: not an option of the code_sandbox reward; "
                                         r"valid: use_local, code_url, timeout_s, memory_mb"):
        build_reward("code_sandbox", timeout=3)
    with pytest.raises(ValueError, match=r"^reward_kwargs\.timeout_s: 0 is out of range"):
        build_reward("code_sandbox", timeout_s=0)
    with pytest.raises(ValueError, match=r"^reward_kwargs\.concurrency: 0; valid: an integer >= 1"):
        build_reward("code_sandbox", concurrency=0)
    with pytest.raises(ValueError, match=r"^code_url: use_local is false, so the code sandbox needs code_url"):
        build_reward("code_sandbox", use_local=False)
    with pytest.raises(ValueError, match=r"^reward_kwargs\.precent: not an option of the math_rule reward; "
                                         r"valid: last_number_fallback, percent_as_fraction"):
        build_reward("math_rule", precent=True)


def test_config_validation_of_the_reward_section() -> None:
    ok = validate_config(changed({"rewards": {"code": {"worker_cls": CODE_SANDBOX_CLS, "use_local": False,
                                                       "code_url": "http://sandbox:8080/run_code"}}}))
    assert ok.ok and ok.warnings == [], (ok.errors, ok.warnings)
    assert ok.config is not None and ok.config.rewards["code"].code_url == "http://sandbox:8080/run_code"
    no_url = validate_config(changed({"rewards": {"code": {"reward_type": "code_sandbox", "use_local": False}}}))
    # first the section's own error; the one-pass report may add what stays wrong with its override applied
    assert no_url.errors[0].path == "rewards.code", no_url.errors
    assert "code_url: use_local is false, so the code sandbox needs code_url" in no_url.errors[0].message
    ftp = validate_config(changed({"rewards": {"code": {"reward_type": "code_sandbox", "code_url": "ftp://x"}}}))
    assert ftp.errors[0].path == "rewards.code", ftp.errors
    assert "code_url: 'ftp://x' is not an http:// or https:// URL" in ftp.errors[0].message


def test_the_reward_section_routes_use_local_and_code_url() -> None:
    """build_reward_fn (the reward role) passes the section's use_local / code_url, as ROLL's worker reads them."""
    cfg = PipelineConfig.model_validate({"rewards": {"code": {
        "worker_cls": CODE_SANDBOX_CLS, "reward_kwargs": {"timeout_s": 5}}}})
    sample = {"case_type": "input", "test_cases": STDIN_CASES, "tag": "code"}
    assert build_reward_fn(cfg)(["p", "p"], [REVERSE_OK, REVERSE_WRONG], [sample, sample]) == [1.0, 0.0]
    remote = PipelineConfig.model_validate({"rewards": {"code": {
        "reward_type": "code_sandbox", "use_local": False, "code_url": "http://127.0.0.1:9/run",
        "reward_kwargs": {"timeout": 5}}}})
    with pytest.raises(ValueError, match=r"^rewards\.code\.reward_kwargs\.timeout: not an option"):
        build_reward_fn(remote)
