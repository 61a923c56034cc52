"""The platform hands every run its outbound policy (issue 41, decision 0047): the allow-list of the deployment
and the ports of its own services, which the trainer refuses on this machine even when allowed."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from policylab.jobs import supervisor
from trainer.config.outbound import ALLOW_VAR, DENY_VAR, OutboundPolicy, OutboundRefused, check_url


def test_a_run_gets_the_allow_list_and_the_platforms_ports(settings) -> None:
    settings.POLICYLAB_OUTBOUND_ALLOW = "127.0.0.1"
    env = supervisor.runtime_env()["env_vars"]
    assert env[ALLOW_VAR] == "127.0.0.1"
    ports = {int(p) for p in env[DENY_VAR].split(",")}
    assert {urlparse(settings.RAY_ADDRESS).port, urlparse(settings.REDIS_URL).port, 8000} <= ports
    policy = OutboundPolicy.from_env(env)
    assert check_url("http://127.0.0.1:9000/v1", "judge_api_url", policy=policy)  # allowed by the deployment
    dashboard = urlparse(settings.RAY_ADDRESS).port
    with pytest.raises(OutboundRefused, match=f"port {dashboard} of this machine"):
        check_url(f"http://127.0.0.1:{dashboard}/api/jobs/x/stop", "judge_api_url", policy=policy)
