"""A config can neither read nor set the Ray cluster's credential (issue 41, decision 0047): `${oc.env:…}`
never yields RAY_AUTH_* whatever POLICYLAB_CONFIG_ENV_ALLOW admits, and system_envs cannot set it."""

from __future__ import annotations

import pytest

from trainer.config.confinement import env_refusal
from trainer.config.loading import ENV_ALLOW_VAR, config_environment


def test_a_deployment_that_allows_every_variable_still_hides_the_ray_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ALLOW_VAR, "*")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/srv/policylab/var/ray_auth_token")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("SOME_DATA", "x")
    env = config_environment()
    assert env["SOME_DATA"] == "x"
    assert "RAY_AUTH_TOKEN_PATH" not in env and "RAY_AUTH_MODE" not in env


@pytest.mark.parametrize("name", ["RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"])
def test_system_envs_cannot_set_it(name: str) -> None:
    refusal = env_refusal(name, extra=("RAY_*",))
    assert refusal is not None and "cannot be set from a config" in refusal
