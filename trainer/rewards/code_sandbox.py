"""ROLL's code-sandbox reward: run the response's code against the sample's test cases.

Data, as ROLL's CodeSandboxRewardWorker reads it from the prompt row: `case_type` (input, assert,
pytest, check_based, text), `test_cases` (a JSON string or a list/dict), `test_case_function` (the
function a call-based `input` case calls; "None" or empty for stdin/stdout programs), `tag`.

- input: each case `{"stdin", "expected_stdout"}`. Without test_case_function the program reads stdin
  and its stdout must equal expected_stdout (line by line, surrounding whitespace ignored, numbers
  compared by value); with it, each stdin line is a JSON argument of the function (`Solution().f` when
  the code defines class Solution, else `f`; a name with "(" is evaluated as written) and the JSON
  result must equal expected_stdout's JSON.
- assert: each case `{"assert_code"}` (or the string) runs after the code; exit status 0 passes.
- pytest: `{"assert_code"}` holding `def test_…` functions; each is called after the code (remotely the
  sandbox runs pytest, as ROLL sends it).
- check_based: `[{"assert_code": "def check(candidate): …", "entry_point", "import_prefix"}]`:
  `check(entry_point)` runs after import_prefix and the code.
- text: the response itself is the data: `{response}` in assert_code becomes the response's literal.

The code is the last fenced block of the response after `</think>` (and `<|begin_of_solution|>`).

Score (ROLL's): pass/fail over all test cases, running each sample's cases in order and stopping at the
first failure. With the local sandbox (`use_local: true`, or a tag containing "livecodebench" as ROLL
routes it) all passed = 1.0, else 0.0; through `code_url` all passed = 1.0, else -1.0 (ROLL's
cal_http_sandbox). A sandbox service that does not answer after 3 tries is an error, not a score.

Samples are scored concurrently by `concurrency` threads (default: the CPUs this process may use locally,
ROLL's 20 for code_url), so a batch of programs that all hit the time limit takes about batch / concurrency
limits.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from trainer.config.bubblewrap import local_sandbox_refusal
from trainer.config.outbound import (
    OutboundFailed,
    OutboundRefused,
    Resolver,
    post_json,
    precheck,
    system_resolver,
)
from trainer.rewards.sandbox import SandboxLimits, run_python, sandbox_layers

CASE_TYPES = ("input", "assert", "pytest", "check_based", "text")
HTTP_TRIES = 3
HTTP_RETRY_WAIT_S = 1.0
HTTP_CONCURRENCY = 20  # ROLL's CodeTester concurrency_limit
PRELUDE = """\
import bisect, collections, copy, functools, heapq, itertools, json, math, operator, random, re, string, sys
from bisect import *
from collections import *
from copy import deepcopy
from functools import *
from heapq import *
from itertools import *
from math import *
from typing import *
sys.setrecursionlimit(100000)
"""
_FENCE_RE = re.compile(r"```[ \t]*([\w+#-]*)[ \t]*\n(.*?)```", re.DOTALL)
_TEST_FN_RE = re.compile(r"^def (test_\w+)\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    """One program run: the full program, its stdin, and what its stdout must be (None: exit status only)."""

    program: str
    stdin: str = ""
    expected: str | None = None
    compare_json: bool = False
    language: str = "python"


Runner = Callable[[Case], tuple[bool, str]]  # -> (exited cleanly, stdout)


# -- the response's code -------------------------------------------------------------------------
def answer_part(response: str) -> str:
    """The response after the reasoning (`<|begin_of_solution|>`, `</think>`), as ROLL cuts it."""
    if "<|begin_of_solution|>" in response:
        response = response.split("<|begin_of_solution|>")[-1]
    if "</think>" in response:
        response = response.split("</think>")[-1]
    return response.strip()


def extract_code(response: str) -> str | None:
    """The last fenced code block of the answer, or None."""
    blocks = _FENCE_RE.findall(answer_part(response))
    return blocks[-1][1].strip() if blocks else None


# -- test cases ----------------------------------------------------------------------------------
def parse_test_cases(raw: Any, index: int) -> list[Any]:
    if raw is None:
        raise ValueError(f"samples[{index}].test_cases: missing; the code_sandbox reward needs the row's "
                         "test_cases column (ROLL's format)")
    cases = json.loads(raw) if isinstance(raw, str) else raw
    cases = [cases] if isinstance(cases, dict) else list(cases)
    if not cases:
        raise ValueError(f"samples[{index}].test_cases: empty; a sample without tests cannot be scored")
    return cases


def _assert_code(case: Any) -> str:
    return case["assert_code"] if isinstance(case, dict) else str(case)


def _function_caller(fn_name: str) -> str:
    return (f"\nimport json as _json, sys as _sys\n_name = {fn_name!r}\n"
            "_args = [_json.loads(_line) for _line in _sys.stdin.read().split('\\n') if _line.strip()]\n"
            "if '(' in _name:\n    _fn = eval(_name)\n"
            "elif 'Solution' in globals():\n    _fn = getattr(Solution(), _name)\n"
            "else:\n    _fn = globals()[_name]\n"
            "_sys.stdout.write(_json.dumps(_fn(*_args)))\n")


def _pytest_runner(assert_code: str) -> str:
    calls = "".join(f"{name}()\n" for name in _TEST_FN_RE.findall(assert_code))
    return f"\n{calls}"


def build_cases(code: str, response: str, case_type: str, tests: list[Any], fn_name: str | None,
                *, remote: bool) -> list[Case]:
    """The programs to run for one sample (see the module docstring)."""
    fn_name = None if fn_name in (None, "", "None") else fn_name
    if case_type == "text":
        literal = repr(answer_part(response))
        return [Case(_assert_code(t).replace("{response}", literal)) for t in tests]
    if case_type == "assert":
        return [Case(f"{PRELUDE}\n{code}\n{_assert_code(t)}\n") for t in tests]
    if case_type == "pytest":
        if remote:
            return [Case(f"{PRELUDE}\n{code}\n{_assert_code(t)}\n", language="pytest") for t in tests]
        return [Case(f"{PRELUDE}\n{code}\n{_assert_code(t)}\n{_pytest_runner(_assert_code(t))}") for t in tests]
    if case_type == "check_based":
        t = tests[0]
        entry = t.get("entry_point") or "candidate"
        return [Case(f"{PRELUDE}\n{t.get('import_prefix', '')}\n{code}\n{t['assert_code']}\ncheck({entry})\n")]
    program = f"{PRELUDE}\n{code}\n" + (_function_caller(fn_name) if fn_name else "")
    return [Case(program, stdin=str(t["stdin"]), expected=str(t["expected_stdout"]), compare_json=bool(fn_name))
            for t in tests]


# -- judging -------------------------------------------------------------------------------------
def _same_token(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return False


def outputs_match(got: str, expected: str) -> bool:
    """Equal line by line after stripping, or token by token with numbers compared by value."""
    got_lines = [line.strip() for line in got.strip().splitlines()]
    want_lines = [line.strip() for line in expected.strip().splitlines()]
    if got_lines == want_lines:
        return True
    got_tokens, want_tokens = got.split(), expected.split()
    return len(got_tokens) == len(want_tokens) and all(map(_same_token, got_tokens, want_tokens))


def json_outputs_match(got: str, expected: str) -> bool:
    try:
        return json.loads(got) == json.loads(expected)
    except json.JSONDecodeError:
        return outputs_match(got, expected)


def case_passes(case: Case, exited_cleanly: bool, stdout: str) -> bool:
    if not exited_cleanly:
        return False
    if case.expected is None or case.expected == "":
        return True
    return (json_outputs_match if case.compare_json else outputs_match)(stdout, case.expected)


def all_pass(cases: Sequence[Case], run: Runner) -> bool:
    """Run the cases in order; False at the first that fails."""
    for case in cases:
        exited_cleanly, stdout = run(case)
        if not case_passes(case, exited_cleanly, stdout):
            return False
    return True


# -- runners -------------------------------------------------------------------------------------
def local_runner(limits: SandboxLimits) -> Runner:
    def run(case: Case) -> tuple[bool, str]:
        result = run_python(case.program, stdin=case.stdin, limits=limits)
        return result.ok, result.stdout

    return run


def http_runner(url: str, timeout_s: float, resolver: Resolver = system_resolver) -> Runner:
    """Runs a case on a SandboxFusion-style service, as ROLL's CodeTester speaks to it: POST
    `{code, language, stdin, expected_stdout, compile_timeout, run_timeout}`; the answer's `status` is
    Success, Failed or SandboxError (retried), its `run_result.stdout` the program's output. Each request goes
    through the outbound policy (trainer.config.outbound)."""

    def run(case: Case) -> tuple[bool, str]:
        body = {"code": case.program, "language": case.language, "stdin": case.stdin,
                "expected_stdout": case.expected or "", "compile_timeout": timeout_s, "run_timeout": timeout_s}
        answer = _post_with_retries(url, body, timeout_s + 30, resolver)
        return answer.get("status") == "Success", str((answer.get("run_result") or {}).get("stdout") or "")

    return run


def _post_with_retries(url: str, body: dict[str, Any], timeout_s: float, resolver: Resolver) -> dict[str, Any]:
    """The service's answer; retried on no answer, HTTP 408 / 429 / 5xx, a body that is not JSON and
    SandboxError. A URL the outbound policy refuses and any other HTTP status fail at once. What the
    service wrote is never quoted."""
    last = ""
    for attempt in range(HTTP_TRIES):
        if attempt:
            time.sleep(HTTP_RETRY_WAIT_S)
        try:
            answer = post_json(url, body, "code_url", timeout_s=timeout_s, resolver=resolver)
        except OutboundRefused:
            raise
        except OutboundFailed as exc:
            last = str(exc)
            if exc.status is None or exc.status in (408, 429) or exc.status >= 500:
                continue
            raise RuntimeError(f"code_url {url}: {last}") from None
        except ValueError:
            last = "an answer that is not JSON"
            continue
        if not isinstance(answer, dict):
            last = "an answer that is not a JSON object"
            continue
        if answer.get("status") != "SandboxError":
            return answer
        last = "status SandboxError"
    raise RuntimeError(f"code_url {url}: the sandbox service did not answer after {HTTP_TRIES} tries ({last})")


# -- the reward ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CodeSandboxOptions:
    """The reward's settings: `use_local` and `code_url` from the reward section (ROLL's keys), the
    rest from `reward_kwargs` (PolicyLab's; ROLL fixes them in code): `timeout_s` (wall clock per test
    case; ROLL's local default 20), `memory_mb`, `max_output_bytes`, `concurrency` (samples scored at
    once), `python` (the interpreter that runs the programs, standard library only; its prefix is bound
    read-only into the sandbox). `use_local: true` needs bubblewrap (docs/decisions/0046): refused here, and
    never run unsandboxed, where bwrap is missing or cannot create namespaces."""

    use_local: bool = True
    code_url: str | None = None
    timeout_s: float = 20.0
    memory_mb: int = 1024
    max_output_bytes: int = 1024 * 1024
    concurrency: int | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        if not self.use_local and not self.code_url:
            raise ValueError("code_url: use_local is false, so the code sandbox needs code_url (the sandbox "
                             "service's http(s) URL); set code_url or use_local: true")
        refusal = local_sandbox_refusal() if self.use_local else None
        if refusal:
            raise ValueError(refusal)
        if self.code_url:
            precheck(self.code_url, "code_url")  # and again before each request
        if self.python is not None and not os.access(self.python, os.X_OK):
            raise ValueError(f"reward_kwargs.python: {self.python!r} is not an executable Python interpreter")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"reward_kwargs.concurrency: {self.concurrency!r}; valid: an integer >= 1")
        try:
            self.limits()
        except ValueError as exc:
            raise ValueError(f"reward_kwargs.{exc}") from None

    def limits(self) -> SandboxLimits:
        return SandboxLimits(timeout_s=self.timeout_s, memory_mb=self.memory_mb,
                             max_output_bytes=self.max_output_bytes, python=self.python or sys.executable)

    def workers(self, remote: bool) -> int:
        return self.concurrency or (HTTP_CONCURRENCY if remote else len(os.sched_getaffinity(0)))


def score_sample(response: str, sample: dict[str, Any], index: int, options: CodeSandboxOptions) -> float:
    """1.0 if the response passes all the sample's test cases; else 0.0 locally, -1.0 through code_url."""
    local = options.use_local or "livecodebench" in str(sample.get("tag") or "")
    fail = 0.0 if local else -1.0
    tests = parse_test_cases(sample.get("test_cases"), index)
    case_type = sample.get("case_type") or "input"
    if case_type not in CASE_TYPES:
        raise ValueError(f"samples[{index}].case_type: {case_type!r}; valid: {', '.join(CASE_TYPES)}")
    code = "" if case_type == "text" else extract_code(response)
    if code is None:
        return fail
    cases = build_cases(code, response, case_type, tests, sample.get("test_case_function"), remote=not local)
    run = local_runner(options.limits()) if local else http_runner(str(options.code_url), options.timeout_s)
    return 1.0 if all_pass(cases, run) else fail


def code_sandbox_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                        **options: Any) -> list[float]:
    """ROLL's code-sandbox score of each response (module docstring), samples scored concurrently."""
    opts = CodeSandboxOptions(**options)
    if not responses:
        return []
    remote = not opts.use_local
    if not remote:
        sandbox_layers(opts.limits())  # once per limits: logs which isolation layers hold here
    with ThreadPoolExecutor(max_workers=min(opts.workers(remote), len(responses))) as pool:
        futures = [pool.submit(score_sample, r, s, i, opts)
                   for i, (r, s) in enumerate(zip(responses, samples, strict=True))]
        return [f.result() for f in futures]
