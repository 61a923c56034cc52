"""Team secrets in a config (issue 41, decision 0045): `${secret:NAME}` stays a reference in every copy of a
config and is resolved only where a field is used, from what the platform passed the trainer; credentials
written in plain text are shown redacted and warned about."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from config_testing import changed

from trainer.cli import run_validate
from trainer.config import load_raw, validate_config
from trainer.config import secrets as secrets_module
from trainer.config.secrets import (
    REDACTED,
    RUN_SECRETS_VAR,
    SecretUnavailable,
    redact_config,
    redact_config_text,
    referenced_names,
    resolve_secrets,
)

JUDGE = {"reward_type": "llm_judge", "judge_model_type": "api", "judge_api_url": "https://judge.example/v1",
         "judge_model_name": "qwen-judge", "judge_api_key": "${secret:JUDGE_KEY}"}
VALUE = "sk-live-0f9a7c3e"


@pytest.fixture
def given(monkeypatch: pytest.MonkeyPatch):
    """What the platform passes a run: RUN_SECRETS_VAR in the trainer's environment, read once."""
    def give(values: dict[str, str]) -> None:
        monkeypatch.setenv(RUN_SECRETS_VAR, json.dumps(values))
        monkeypatch.setattr(secrets_module, "_given", None)
    return give


def test_a_reference_validates_and_stays_a_reference() -> None:
    result = validate_config(changed({"rewards.judge": JUDGE}), env={})  # env: as the trainer loads it
    assert result.ok, result.errors
    assert result.config.rewards["judge"].judge_api_key == "${secret:JUDGE_KEY}"
    assert not [i for i in result.warnings if "judge_api_key" in i.path]
    assert referenced_names(result.config.model_dump(mode="json")) == {"JUDGE_KEY"}


def test_validate_show_keeps_the_placeholder(tmp_path: Path, given) -> None:
    given({"JUDGE_KEY": VALUE})  # even in a process that holds the value
    path = tmp_path / "judge.yaml"
    path.write_text((Path(__file__).parents[3] / "examples" / "demo_grpo_cpu.yaml").read_text())
    out, err = io.StringIO(), io.StringIO()
    overrides = [f"+rewards.judge.{k}={v}" for k, v in JUDGE.items()]
    assert run_validate(str(path), overrides, show=True, out=out, err=err) == 0, err.getvalue()
    assert "judge_api_key: \\${secret:JUDGE_KEY}" in out.getvalue()  # escaped, as every `${` of a shown config
    assert VALUE not in out.getvalue() + err.getvalue()


def test_resolved_where_used_from_what_the_platform_passed(given, monkeypatch: pytest.MonkeyPatch) -> None:
    given({"JUDGE_KEY": VALUE, "OTHER": "x"})
    assert resolve_secrets("${secret:JUDGE_KEY}") == VALUE
    import os
    assert RUN_SECRETS_VAR not in os.environ  # child processes of the trainer never inherit the secrets
    with pytest.raises(SecretUnavailable, match=r"\$\{secret:MISSING\}.*given: JUDGE_KEY, OTHER"):
        resolve_secrets("${secret:MISSING}")
    assert resolve_secrets("plain") == "plain" and resolve_secrets(None) is None


def test_a_reference_outside_the_secret_fields_is_refused() -> None:
    result = validate_config(changed({"rewards.judge": JUDGE, "tracker_kwargs": {"project": "${secret:JUDGE_KEY}"}}))
    assert [(i.path, i.message) for i in result.errors] == [
        ("tracker_kwargs.project", "${secret:…} is resolved in judge_api_key only; a team secret cannot be used here")]


def test_a_bad_name_is_refused_naming_the_rule() -> None:
    result = validate_config(changed({"rewards.judge": {**JUDGE, "judge_api_key": "${secret:9 lives}"}}))
    assert not result.ok
    assert any("letters, digits and _" in i.message for i in result.errors), result.errors


def test_a_plain_key_warns_and_recommends_a_secret() -> None:
    result = validate_config(changed({"rewards.judge": {**JUDGE, "judge_api_key": VALUE}}))
    assert result.ok
    [warning] = [i for i in result.warnings if i.path == "rewards.judge.judge_api_key"]
    assert "${secret:NAME}" in warning.message and VALUE not in warning.message


def test_the_reference_survives_a_second_load() -> None:
    """The platform stores the loaded config and loads it again for each attempt."""
    once = load_raw({"rewards": {"judge": dict(JUDGE)}})
    assert load_raw(once)["rewards"]["judge"]["judge_api_key"] == "${secret:JUDGE_KEY}"


def test_plain_credentials_are_redacted_for_display() -> None:
    tree = {"rewards": {"judge": {**JUDGE, "judge_api_key": VALUE}, "other": dict(JUDGE)},
            "tracker_kwargs": {"api_key": VALUE, "project": "p"}, "tokenizer": {"pad_token": "<pad>"}}
    shown = redact_config(tree)
    assert shown["rewards"]["judge"]["judge_api_key"] == REDACTED
    assert shown["rewards"]["other"]["judge_api_key"] == "${secret:JUDGE_KEY}"
    assert shown["tracker_kwargs"] == {"api_key": REDACTED, "project": "p"}
    assert shown["tokenizer"] == {"pad_token": "<pad>"}  # a tokenizer's special token is not a credential
    assert tree["rewards"]["judge"]["judge_api_key"] == VALUE  # a copy


@pytest.mark.parametrize(("text", "shown"), [
    (f"  judge_api_key: {VALUE}\n  x: 1", f"  judge_api_key: {REDACTED}\n  x: 1"),
    (f'judge_api_key: "{VALUE}"  # the key', f"judge_api_key: {REDACTED}  # the key"),
    (f"judge: {{judge_api_key: '{VALUE}', judge_model_name: m}}", f"judge: {{judge_api_key: {REDACTED}, judge_model_name: m}}"),
    (f"rewards.judge.judge_api_key={VALUE}", f"rewards.judge.judge_api_key={REDACTED}"),
    (f"tracker_kwargs: {{api_key: {VALUE}}}", f"tracker_kwargs: {{api_key: {REDACTED}}}"),
    ("judge_api_key: ${secret:JUDGE_KEY}", "judge_api_key: ${secret:JUDGE_KEY}"),
    ("judge_api_key: ${oc.env:JUDGE_KEY}", "judge_api_key: ${oc.env:JUDGE_KEY}"),
    ("judge_api_key: null\npad_token: '<pad>'\nmax_new_tokens: 5", "judge_api_key: null\npad_token: '<pad>'\nmax_new_tokens: 5"),
])
def test_plain_credentials_in_config_text_are_redacted(text: str, shown: str) -> None:
    assert redact_config_text(text) == shown


def test_a_redacted_value_copied_from_a_shown_config_is_refused() -> None:
    result = validate_config(changed({"rewards.judge": {**JUDGE, "judge_api_key": REDACTED}}))
    assert [(i.path, i.severity) for i in result.errors] == [("rewards.judge.judge_api_key", "error")]
    assert "${secret:NAME}" in result.errors[0].message
