"""The outbound-call policy (issue 41, decision 0047) for the two URLs a run calls: an llm_judge reward's
judge_api_url and a code_sandbox reward's code_url. Refused at validation and again at connect time (against a
real local server that must receive nothing), connected to the checked address, failures told without the
server's body. Expected classes of addresses are from RFC 1918, 4193, 3927, 6598 and 5737, not from the code."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.trainer.config.config_testing import changed
from tests.trainer.rewards.judge_server import judge_server
from trainer.config import validate_config
from trainer.config.outbound import (
    ALLOW_VAR,
    DENY_VAR,
    OutboundPolicy,
    OutboundRefused,
    address_problem,
    check_url,
)
from trainer.rewards.code_sandbox import Case, http_runner
from trainer.rewards.llm_judge import JudgeApiError, call_judge_api
from trainer.rewards.registry import build_reward

MESSAGES = [{"role": "user", "content": "<response>\nabc\n</response>"}]
SSRF = [
    ("http://127.0.0.1:8265/api/jobs/raysubmit_1/stop?x=", "query string"),  # the probe's Ray job stop
    ("https://judge.example/v1?x=", "query string"),
    ("https://judge.example/v1#part", "fragment"),
    ("http://user:pw@judge.example/v1", "user@"),
    ("http://127.0.0.1:8265/v1", "loopback"),
    ("http://localhost:8000/v1", "loopback"),  # a name that resolves to 127.0.0.1
    ("http://2130706433/v1", "loopback"),  # 127.0.0.1 written as one number
    ("http://[::1]:8000/v1", "loopback"),
    ("http://10.1.2.3/v1", "private"),  # RFC 1918
    ("http://192.168.1.20:8080/v1", "private"),
    ("http://172.16.0.9/v1", "private"),
    ("http://[fd12::1]/v1", "private"),  # RFC 4193 ULA
    ("http://169.254.169.254/latest/meta-data", "link-local"),  # the cloud metadata service
    ("http://100.64.0.1/v1", "CGNAT"),  # RFC 6598
    ("http://0.0.0.0:8000/v1", "unspecified"),
    ("http://224.0.0.1/v1", "multicast"),
]


def judge_section(url: str) -> dict[str, Any]:
    return {"rewards.judge": {"reward_type": "llm_judge", "judge_model_type": "api", "judge_api_url": url,
                              "judge_model_name": "judge-7b"}}


def code_section(url: str) -> dict[str, Any]:
    return {"rewards.code": {"reward_type": "code_sandbox", "use_local": False, "code_url": url}}


@pytest.fixture(autouse=True)
def no_deployment_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_VAR, raising=False)
    monkeypatch.delenv(DENY_VAR, raising=False)


# -- at validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "why"), SSRF, ids=[u for u, _ in SSRF])
def test_validation_refuses_the_url_naming_the_field(url: str, why: str) -> None:
    for section, path in ((judge_section(url), "rewards.judge.judge_api_url"), (code_section(url), "rewards.code.code_url")):
        result = validate_config(changed(section))
        found = [e for e in result.errors if e.path == path]
        assert found, (path, result.errors)
        assert why in found[0].message and "POLICYLAB_OUTBOUND_ALLOW" in found[0].message


@pytest.mark.parametrize(("url", "why"), SSRF[:8], ids=[u for u, _ in SSRF[:8]])
def test_building_the_reward_refuses_it_too(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        build_reward("llm_judge", judge_model_type="api", judge_api_url=url, judge_model_name="m")
    with pytest.raises(ValueError, match=why):
        build_reward("code_sandbox", use_local=False, code_url=url)


def test_a_public_address_and_an_allowed_local_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    assert validate_config(changed(judge_section("https://93.184.216.34/v1"))).ok
    assert not validate_config(changed(judge_section("http://127.0.0.1:9000/v1"))).ok
    monkeypatch.setenv(ALLOW_VAR, "http://127.0.0.1:9000/v1")
    assert validate_config(changed(judge_section("http://127.0.0.1:9000/v1"))).ok
    # the prefix opens its own port and path only
    assert not validate_config(changed(judge_section("http://127.0.0.1:90001/v1"))).ok
    assert not validate_config(changed(judge_section("http://127.0.0.1:9000/v1x"))).ok
    assert not validate_config(changed(judge_section("http://127.0.0.1:8265/v1"))).ok


def test_allowed_hosts_and_prefixes_match_exactly() -> None:
    def resolve(host: str, port: int) -> list[str]:
        return ["10.0.0.7"]

    policy = OutboundPolicy(("judge.internal", "http://sandbox.internal:8080/run"))
    assert check_url("https://JUDGE.internal/v1", "f", policy=policy, resolver=resolve).address == "10.0.0.7"
    assert check_url("http://sandbox.internal:8080/run/code", "f", policy=policy, resolver=resolve)
    for refused in ("https://judge.internal.evil/v1", "http://sandbox.internal:8081/run",
                    "https://sandbox.internal:8080/run", "http://sandbox.internal:8080/running"):
        with pytest.raises(OutboundRefused, match=r"10\.0\.0\.7, a private address"):
            check_url(refused, "f", policy=policy, resolver=resolve)


def test_the_platforms_own_ports_stay_refused_even_when_allowed() -> None:
    policy = OutboundPolicy(("127.0.0.1",), frozenset({8265}))
    assert check_url("http://127.0.0.1:9000/v1", "f", policy=policy)
    with pytest.raises(OutboundRefused, match=r"port 8265 of this machine .*POLICYLAB_OUTBOUND_DENY"):
        check_url("http://127.0.0.1:8265/v1", "f", policy=policy)
    with pytest.raises(OutboundRefused, match="are not port numbers"):
        OutboundPolicy.from_env({DENY_VAR: "8265,redis"})


def own_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_address_classes() -> None:
    assert address_problem("93.184.216.34") is None and address_problem("2606:4700::1111") is None
    assert address_problem("::ffff:127.0.0.1") == "a loopback address"  # IPv4-mapped IPv6
    assert address_problem("2002:7f00:1::1") == "a loopback address"  # 6to4 of 127.0.0.1
    assert address_problem("198.51.100.7") is not None  # RFC 5737 documentation range
    assert address_problem("ff02::1") == "a multicast address" and address_problem("fe80::1").startswith("a link-local")
    own = own_address()
    if own is not None:
        assert address_problem(own) == "an address of this machine"


# -- at connect time -------------------------------------------------------------------------------
def test_a_judge_on_loopback_receives_nothing_and_is_not_retried() -> None:
    with judge_server(allow=False) as server:
        with pytest.raises(JudgeApiError, match=r"judge_api_url: .* resolves to 127.0.0.1, a loopback address"):
            call_judge_api(server.base_url, "m", MESSAGES, api_key=None, timeout_s=2, tries=3, retry_wait_s=0)
        with pytest.raises(JudgeApiError, match="query string"):
            call_judge_api(server.base_url + "/x?y=", "m", MESSAGES, api_key=None, timeout_s=2, tries=3,
                           retry_wait_s=0)
    assert server.received == []


def test_a_name_that_turns_local_after_validation_is_refused_at_connect() -> None:
    """DNS rebinding: public when validated, 127.0.0.1 when the request is made."""
    answers = [["93.184.216.34"], ["127.0.0.1"], ["127.0.0.1"], ["127.0.0.1"]]
    calls: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return answers[len(calls) - 1]

    with judge_server(allow=False) as server:
        url = f"http://judge.test:{server.server_address[1]}/v1"
        check_url(url, "judge_api_url", resolver=rebinding)  # validation
        with pytest.raises(JudgeApiError, match=r"resolves to 127\.0\.0\.1, a loopback address"):
            call_judge_api(url, "m", MESSAGES, api_key=None, timeout_s=2, tries=3, retry_wait_s=0, resolver=rebinding)
    assert server.received == [] and len(calls) == 2  # one check at connect, no retry


def test_the_request_goes_to_the_checked_address_with_the_name_as_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """One lookup per request, and the connection goes to its answer: a name no DNS knows reaches the server."""
    calls: list[str] = []

    def once(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]

    with judge_server(allow=False) as server:
        port = server.server_address[1]
        monkeypatch.setenv(ALLOW_VAR, f"http://judge.test:{port}/v1")
        reply = call_judge_api(f"http://judge.test:{port}/v1", "m", MESSAGES, api_key=None, timeout_s=5, tries=1,
                               retry_wait_s=0, resolver=once)
    assert reply == "Score: 3" and calls == ["judge.test"]
    assert server.received[0]["host"] == f"judge.test:{port}" and server.received[0]["path"] == "/v1/chat/completions"


class Refusing(BaseHTTPRequestHandler):
    """A service that refuses with a body full of what must not reach a run's log."""

    count = 0

    def do_POST(self) -> None:
        Refusing.count += 1
        data = b'{"detail": "Traceback: /srv/platform/.venv/lib/python3.11/site-packages/ray/dashboard/x.py"}'
        self.send_response(403)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    Refusing.count = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    finally:
        server.shutdown()
        server.server_close()


def test_code_url_on_loopback_is_refused_at_connect(refusing_url: str) -> None:
    with pytest.raises(OutboundRefused, match=r"code_url: .* a loopback address"):
        http_runner(refusing_url, 2.0)(Case("print(1)"))
    assert Refusing.count == 0


def test_a_failed_call_is_logged_without_its_body(refusing_url: str, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(ALLOW_VAR, refusing_url)
    with pytest.raises(RuntimeError) as failed:
        http_runner(refusing_url, 2.0)(Case("print(1)"))
    logging.getLogger("test").error("reward failed: %s", failed.value)
    assert str(failed.value) == f"code_url {refusing_url}: HTTP 403 Forbidden"
    assert Refusing.count == 1  # a 4xx is not repeated
    assert "Traceback" not in caplog.text and "site-packages" not in caplog.text and "403 Forbidden" in caplog.text
    judge_url = refusing_url.removesuffix("/run_code")
    monkeypatch.setenv(ALLOW_VAR, judge_url)
    with pytest.raises(JudgeApiError) as judged:
        call_judge_api(judge_url, "m", MESSAGES, api_key="sk-x", timeout_s=2, tries=3, retry_wait_s=0)
    assert str(judged.value).endswith("/chat/completions: HTTP 403 Forbidden") and "srv" not in str(judged.value)
    assert json.dumps(str(judged.value)).count("Traceback") == 0
