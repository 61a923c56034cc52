"""Team secrets in a config: `${secret:NAME}` (docs/decisions/0045-team-secrets.md).

A config names a secret and never holds it. Loading keeps the reference as written (the `secret` resolver
returns it unchanged), so every copy of a config (the experiment's snapshot, the run directory's
config.yaml, `validate --show`, the fingerprint's hash, what trackers upload) carries the name, not the
value. The platform passes the values a run references to its trainer in one environment variable,
RUN_SECRETS_VAR (JSON {name: value}); `resolve_secrets` substitutes them where a field is used (the judge's
Authorization header), and nowhere else. Only SECRET_FIELDS are resolved: a reference anywhere else would
reach the run as its literal text, so validation refuses it.

Plain values in secret-looking fields (`judge_api_key: sk-…`, `tracker_kwargs.api_key`) still work, but the
platform shows them as REDACTED (`redact_config`, `redact_config_text`) and validation warns
(`plain_secret_issues`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from trainer.config.issues import ConfigIssue

RUN_SECRETS_VAR = "POLICYLAB_RUN_SECRETS"
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,49}"
NAME = re.compile(NAME_PATTERN)
REFERENCE = re.compile(r"\$\{\s*secret\s*:\s*(" + NAME_PATTERN + r")\s*\}")
_ANY_REFERENCE = re.compile(r"\$\{\s*secret\s*:")
# Fields whose value is resolved where it is used (trainer.rewards.llm_judge). A field joins the list when its
# consumer calls resolve_secrets.
SECRET_FIELDS = ("judge_api_key",)
# Keys whose plain value is a credential: judge_api_key, tracker_kwargs' api_key / token / password, …
# (not pad_token / eos_token: a tokenizer's special tokens are not credentials).
_CREDENTIAL = r"api_?key|api_?token|access_token|auth_token|hf_token|password|passwd|secret_key|access_key|private_key"
SECRET_KEY = re.compile(rf"(?:^|[_.])(?:{_CREDENTIAL})$|(?:^|\.)(?:token|secret)$", re.IGNORECASE)  # a.b.key too
REDACTED = "<redacted>"


class SecretUnavailable(KeyError):
    """A `${secret:NAME}` this process was not given (the platform passes the ones a run references)."""

    def __str__(self) -> str:
        return str(self.args[0])


def reference(name: str) -> str:
    return "${secret:" + name + "}"


def keep_reference(name: Any) -> str:
    """The `secret` resolver of config loading: the reference itself, so no copy of a config holds a value."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"${{secret:{name}}}: a secret's name is letters, digits and _, not starting with a "
                         "digit, at most 50 characters (e.g. ${secret:JUDGE_API_KEY})")
    return reference(name)


def referenced_names(tree: Any) -> set[str]:
    """The names of every `${secret:NAME}` in a config tree (dict, list or text)."""
    return {match.group(1) for text in _strings(tree) for match in REFERENCE.finditer(text)}


def referenced_fields(tree: Any, path: str = "") -> list[tuple[str, str]]:
    """(field path, secret name) of every `${secret:NAME}` in a config tree, in the tree's order."""
    if isinstance(tree, Mapping | list):
        items = tree.items() if isinstance(tree, Mapping) else enumerate(tree)
        return [found for key, value in items for found in referenced_fields(value, f"{path}.{key}" if path else str(key))]
    return [(path, m.group(1)) for m in REFERENCE.finditer(tree)] if isinstance(tree, str) else []


def is_secret_key(key: str) -> bool:
    """True for a key whose value is a credential (judge_api_key, api_key, token, password, …)."""
    return bool(SECRET_KEY.search(str(key)))


def _strings(node: Any) -> list[str]:
    if isinstance(node, Mapping):
        return [text for value in node.values() for text in _strings(value)]
    if isinstance(node, list | tuple):
        return [text for value in node for text in _strings(value)]
    return [node] if isinstance(node, str) else []


def _shown(value: Any) -> Any:
    """A secret field's value as users see it: a reference as written, any other text REDACTED."""
    if isinstance(value, str) and value and not REFERENCE.fullmatch(value.strip()):
        return REDACTED
    return value


def redact_config(tree: Any) -> Any:
    """A copy of a config tree with every plain value of a secret-looking key REDACTED (references kept)."""
    if isinstance(tree, Mapping):
        return {key: _shown(value) if is_secret_key(key) and not isinstance(value, Mapping | list)
                else redact_config(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [redact_config(value) for value in tree]
    return tree


# `key: value` in YAML (block or flow style) and `a.b.key=value` in an override; the value up to the end of the
# line, a flow separator or a comment. Bounded repetition keeps the search linear on any input.
_TEXT_FIELD = re.compile(
    r"(?P<key>(?<![\w-])[\w-]{0,60}(?:key|token|password|passwd|secret)['\"]?)"
    r"(?P<sep>[ \t]{0,20}[:=][ \t]{0,20})(?P<value>\\?\$\{[^{}\n]{0,200}\}|\"[^\"\n]{0,4000}\"|'[^'\n]{0,4000}'|[^\s,}\]#'\"][^\n,}\]#]{0,4000})",
    re.IGNORECASE,
)


def redact_config_text(text: str) -> str:
    """Config text (YAML as submitted, an override) with the plain value of every secret-looking key REDACTED."""
    def shown(match: re.Match[str]) -> str:
        value = match["value"].strip().strip("'\"")
        if not is_secret_key(match["key"].strip("'\"")) or value in ("", "null", "~") or "${" in value:
            return match.group(0)  # no value, or an interpolation (a reference, ${oc.env:…}): nothing to hide
        return f"{match['key']}{match['sep']}{REDACTED}"

    return _TEXT_FIELD.sub(shown, text) if text else text


def _leaves(tree: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, key, value) of every value of `tree` that is neither a mapping nor a list, depth first."""
    items = tree.items() if isinstance(tree, Mapping) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        here = f"{path}.{key}" if path else str(key)
        if isinstance(value, Mapping | list):
            yield from _leaves(value, here)
        else:
            yield here, key, value


def plain_secret_issues(tree: Any) -> list[ConfigIssue]:
    """A warning for each secret-looking key written with its value in the config (shown to no one, but stored
    with the experiment and passed around in the clear)."""
    issues: list[ConfigIssue] = []
    for here, key, value in _leaves(tree):
        if is_secret_key(str(key)) and _shown(value) == REDACTED and "${" not in value:  # not an interpolation
            issues.append(ConfigIssue(here, "a credential written in the config: store it as a team secret (an "
                                            "admin: Team secrets page, or POST /api/teams/<id>/secrets/) and write "
                                            "${secret:NAME}; the "
                                            "value is hidden from the config's viewers either way", "warning"))
    return issues


def misplaced_reference_issues(tree: Any) -> list[ConfigIssue]:
    """An error for each `${secret:…}` outside SECRET_FIELDS (it would reach the run as its literal text), for a
    reference that is not the field's whole value, and for a REDACTED copied from a shown config."""
    issues: list[ConfigIssue] = []
    for here, key, value in _leaves(tree):
        if value == REDACTED and is_secret_key(str(key)):
            issues.append(ConfigIssue(here, f"{REDACTED} stands for a credential hidden from view, not a value; write "
                                            "${secret:NAME} with a secret of your team"))
        elif isinstance(value, str) and _ANY_REFERENCE.search(value):
            if key not in SECRET_FIELDS:
                issues.append(ConfigIssue(here, f"${{secret:…}} is resolved in {', '.join(SECRET_FIELDS)} only; "
                                                "a team secret cannot be used here"))
            elif not REFERENCE.fullmatch(value.strip()):
                issues.append(ConfigIssue(here, "write the whole value as ${secret:NAME} (letters, digits and _)"))
    return issues


_given: dict[str, str] | None = None


def run_secrets() -> dict[str, str]:
    """The secrets the platform passed this process (RUN_SECRETS_VAR), read once and then removed from the
    environment, so the processes the trainer starts (a code sandbox, an inference server) never inherit them."""
    global _given
    if _given is None:
        text = os.environ.pop(RUN_SECRETS_VAR, "") or "{}"
        try:
            given = json.loads(text)
        except json.JSONDecodeError:
            given = None
        if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
            raise ValueError(f"{RUN_SECRETS_VAR}: not a JSON object of strings")
        _given = given
    return _given


def resolve_secrets(value: str | None) -> str | None:
    """`value` with its `${secret:NAME}` replaced by the secret (the one place a value leaves its reference)."""
    if not value or not _ANY_REFERENCE.search(value):
        return value
    given = run_secrets()

    def secret(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in given:
            available = ", ".join(sorted(given)) or "none"
            raise SecretUnavailable(f"${{secret:{name}}}: this run was not given a secret named {name} (given: "
                                    f"{available}); the platform passes the team secrets a run's config names")
        return given[name]

    return REFERENCE.sub(secret, value)
