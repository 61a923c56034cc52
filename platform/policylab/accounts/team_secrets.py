"""Team secrets: stored encrypted, listed by name, never read back (docs/decisions/0045-team-secrets.md).

An admin of a team sets, replaces and deletes them; every member, viewers included, sees the names, who set
each and when. The value is encrypted with Fernet (`cryptography`: AES-128-CBC + HMAC-SHA256) under the
deployment's POLICYLAB_SECRETS_KEY and decrypted in one place, `values_for_run`, which only the supervisor
calls to hand a starting run the secrets its config names.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet

from policylab.accounts.models import Role, Team, TeamSecret
from policylab.accounts.scoping import role_in
from trainer.config.secrets import NAME

MAX_VALUE_CHARS = 16_384  # a key, a token, a small PEM: not a file store


class SecretError(ValueError):
    """A name or value that cannot be stored (`field` says which), or a run that names a secret its team lacks."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@cache
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    """One Fernet per configured key (any string: a Fernet key is derived from its sha256), the first encrypts."""
    if not keys:
        raise RuntimeError("POLICYLAB_SECRETS_KEY is empty: team secrets cannot be encrypted")
    return MultiFernet([Fernet(base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest())) for key in keys])


def cipher() -> MultiFernet:
    return _cipher(tuple(settings.POLICYLAB_SECRETS_KEYS))


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SecretError("name", f"{str(name)[:60]!r} is not a secret name; use letters, digits and _, not starting "
                          "with a digit, at most 50 characters (e.g. JUDGE_API_KEY)")
    return name


def check_value(value: str) -> str:
    if not isinstance(value, str) or not value:
        raise SecretError("value", "a secret needs a non-empty value")
    if len(value) > MAX_VALUE_CHARS:
        raise SecretError("value", f"{len(value)} characters; at most {MAX_VALUE_CHARS}")
    return value


def require_secret_admin(user: Any, team: Team) -> None:
    """PermissionDenied (403) unless `user` is an admin of `team`: members and viewers only see the names."""
    role = role_in(user, team)
    if role != Role.ADMIN:
        raise PermissionDenied(f"your role in team {team.slug!r} is {role or 'none'}; setting, replacing and deleting "
                               f"team secrets needs {Role.ADMIN.value!r}")


def secrets_of(team: Team) -> QuerySet[TeamSecret]:
    """The team's secrets for listing: names and who set them, never the ciphertext."""
    return TeamSecret.objects.filter(team=team).defer("ciphertext").select_related("created_by", "updated_by")


def set_secret(*, team: Team, name: str, value: str, user: Any) -> tuple[TeamSecret, bool]:
    """Create or replace `name` in `team` (admins only). Returns (the secret, whether it was created)."""
    require_secret_admin(user, team)
    token = cipher().encrypt(check_value(value).encode()).decode()
    secret, created = TeamSecret.objects.get_or_create(
        team=team, name=check_name(name), defaults={"ciphertext": token, "created_by": user, "updated_by": user})
    if not created:
        secret.ciphertext, secret.updated_by = token, user
        secret.save(update_fields=["ciphertext", "updated_by", "updated_at"])
    return secret, created


def delete_secret(*, team: Team, name: str, user: Any) -> bool:
    """Delete `name` from `team` (admins only; checked first). False when the team has no such secret."""
    require_secret_admin(user, team)
    deleted, _ = TeamSecret.objects.filter(team=team, name=name).delete()
    return bool(deleted)


def missing_names(team: Team, names: Iterable[str]) -> str | None:
    """None when `team` has every secret in `names`; else the error a launch shows (what is missing, what exists)."""
    wanted = set(names)
    if not wanted:
        return None
    have = set(TeamSecret.objects.filter(team=team).values_list("name", flat=True))
    missing = sorted(wanted - have)
    if not missing:
        return None
    listed = ", ".join(sorted(have)) or "none yet"
    return (f"${{secret:{missing[0]}}}: team {team.slug!r} has no secret named {', '.join(missing)} (its secrets: "
            f"{listed}); an admin of the team adds it on the Team secrets page (/accounts/secrets/) or with "
            f"POST /api/teams/{team.pk}/secrets/")


def values_for_run(team: Team, names: Iterable[str]) -> dict[str, str]:
    """{name: value} of the secrets a starting run references: the one place a value is decrypted."""
    problem = missing_names(team, names)
    if problem:
        raise SecretError("config", problem)
    rows = TeamSecret.objects.filter(team=team, name__in=set(names)).values_list("name", "ciphertext")
    try:
        return {name: cipher().decrypt(token.encode()).decode() for name, token in rows}
    except InvalidToken:
        raise SecretError("config", "team secrets cannot be decrypted: POLICYLAB_SECRETS_KEY is not the key they were stored "
                          "with (list the old key after the new one to rotate)") from None
