"""Crafted request bodies (issue 10) against the three places a config enters the web side: the
API's validate and create endpoints and the config editor's live check. Each body is at most 11 MB;
each must be refused (4xx; the editor's check answers 200 with ok=false and the errors, its contract
with the page), in under 2 s, without the process growing by 500 MB, and without a crash.

Each request runs in a forked copy of the test process (os.fork: same code, same test database
connection, its own memory): a crash such as libyaml's segfault on 26,000 nested `[` (which killed
the web process before the bounded loader) fails one test instead of killing the pytest session,
and the peak memory measured is that request's alone.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from policylab.experiments.models import Experiment, Project

pytestmark = pytest.mark.django_db

MAX_SECONDS = 2.0
MAX_GROWTH_BYTES = 500 * 2**20


def billion_laughs(levels: int = 9) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def doubling_interpolation(levels: int = 20) -> str:
    lines = ["x0: ab"]
    lines += [f'x{i}: "${{x{i - 1}}}${{x{i - 1}}}"' for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


# name -> (YAML text for the config, or None to send `raw` as the whole JSON body)
YAML_ATTACKS: dict[str, str] = {
    "yaml_nesting_26000": "[" * 26_000 + "]" * 26_000,  # ~52 KB; segfaulted libyaml's composer
    "yaml_nesting_5000": "[" * 5_000 + "]" * 5_000,
    "billion_laughs_9_levels": billion_laughs(9),
    "interpolation_doubling_20_levels": doubling_interpolation(20),
    "device_mapping_16384": "exp_name: x\nactor_train:\n  device_mapping: list(range(0,16384))\n",
    "lone_surrogate": 'exp_name: "\\ud800"\n',
    "body_11_mb": "a" * (11 * 2**20),
}
JSON_ATTACKS: dict[str, bytes] = {
    "json_nesting_200000": b"[" * 200_000,
    "json_lone_surrogate": b'{"config": {"exp_name": "\\ud800"}}',
}
ENDPOINTS = ["/api/configs/validate/", "/api/experiments/", "/editor/check/"]


# --- running one request in a forked child --------------------------------------------------------


def rss_kib(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def in_child(request: Callable[[], Any]) -> dict[str, Any]:
    """Run `request()` in a fork; its status, body, wall time and peak memory growth, or how it died."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_fd)
        try:
            Path("/proc/self/clear_refs").write_text("5")  # restart the peak-RSS (VmHWM) count here
            before = rss_kib("VmRSS")
            start = time.perf_counter()
            response = request()
            seconds = time.perf_counter() - start
            result = {
                "status": response.status_code,
                "body": response.content[:4_000_000].decode("utf-8", "replace"),  # the editor echoes its text
                "seconds": seconds,
                "growth": (rss_kib("VmHWM") - before) * 1024,
            }
        except BaseException as exc:
            result = {"exception": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        with os.fdopen(write_fd, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        output = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"the request killed the process with {signal.Signals(os.WTERMSIG(status)).name}")
    return json.loads(output)


# --- fixtures and requests -------------------------------------------------------------------------


@pytest.fixture
def project(alice, team_a) -> Project:
    return Project.objects.create(team=team_a, name="attacks")


@pytest.fixture
def api(api_alice) -> APIClient:
    api_alice.raise_request_exception = False  # a 500 must come back as a status, not a raise
    return api_alice


@pytest.fixture
def browser(alice) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


def send_yaml(endpoint: str, text: str, api: APIClient, browser: Client, project: Project):
    if endpoint == "/editor/check/":
        return browser.post(endpoint, {"editor_mode": "yaml", "config_yaml": text}, headers={"X-Requested-With": "fetch"})
    body = {"config": text} | ({"project": project.pk, "name": "attack"} if endpoint == "/api/experiments/" else {})
    return api.post(endpoint, body, format="json")


def send_json(endpoint: str, raw: bytes, api: APIClient, browser: Client):
    if endpoint == "/editor/check/":  # the editor posts a form: the same bytes arrive as its YAML text
        return browser.post(endpoint, {"editor_mode": "yaml", "config_yaml": raw.decode()}, headers={"X-Requested-With": "fetch"})
    return api.generic("POST", endpoint, raw, content_type="application/json")


def assert_refused(result: dict[str, Any], endpoint: str) -> None:
    assert "exception" not in result, result["exception"]
    assert result["seconds"] < MAX_SECONDS, f"took {result['seconds']:.2f} s"
    assert result["growth"] < MAX_GROWTH_BYTES, f"grew by {result['growth'] / 2**20:.0f} MiB"
    status, body = result["status"], result["body"]
    if endpoint == "/editor/check/" and status == 200:
        payload = json.loads(body)
        assert payload["ok"] is False and payload["errors"], payload
        return
    assert 400 <= status < 500, f"{status}: {body[:500]}"
    assert '"errors"' in body, body[:500]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("attack", list(YAML_ATTACKS))
def test_yaml_attack_is_refused_quickly_and_cheaply(attack, endpoint, api, browser, project):
    text = YAML_ATTACKS[attack]
    result = in_child(lambda: send_yaml(endpoint, text, api, browser, project))
    assert_refused(result, endpoint)
    if attack == "body_11_mb":
        assert result["status"] == 413
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("attack", list(JSON_ATTACKS))
def test_json_attack_is_refused_quickly_and_cheaply(attack, endpoint, api, browser):
    raw = JSON_ATTACKS[attack]
    result = in_child(lambda: send_json(endpoint, raw, api, browser))
    assert_refused(result, endpoint)
    if endpoint.startswith("/api/") and attack == "json_nesting_200000":
        assert "nested deeper than 64" in result["body"]


def alias_bomb_in(config: str, levels: int = 4) -> str:
    """`config` with a 9^levels alias bomb where a config may hold anything (tracker_kwargs)."""
    bomb = "".join(f"  {line}\n" for line in billion_laughs(levels).splitlines())
    return config.replace("tracker_kwargs:\n", "tracker_kwargs:\n" + bomb, 1)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_9x4_alias_bomb_in_a_real_config_is_refused_in_half_a_second(endpoint, api, browser, project, demo_yaml):
    """Issue 34: 2.4 kB that expand to 8,200 values (under the node limit) were accepted and cost 6-10 s of CPU."""
    text = alias_bomb_in(demo_yaml)
    assert len(text) - len(demo_yaml) < 300  # the bomb itself: four short lines (the probe's file was 2.4 kB)
    result = in_child(lambda: send_yaml(endpoint, text, api, browser, project))
    assert_refused(result, endpoint)
    assert result["seconds"] < 0.5, f"took {result['seconds']:.2f} s"
    assert "YAML aliases (*name) expand to more than 1,000 values" in result["body"]
    assert not Experiment.objects.exists()


def test_a_refused_attack_leaves_the_endpoint_working(api, project, demo_yaml):
    """The child did the attacking; this process still validates and saves a real config."""
    in_child(lambda: send_yaml("/api/configs/validate/", YAML_ATTACKS["yaml_nesting_26000"], api, Client(), project))
    response = api.post("/api/experiments/", {"project": project.pk, "name": "real", "config": demo_yaml}, format="json")
    assert response.status_code == 201, response.content[:500]
