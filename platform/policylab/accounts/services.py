"""Account services: teams, memberships and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from policylab.accounts.models import ApiToken, Membership, Role, Team

TOKEN_PREFIX = "plk_"
PREFIX_LENGTH = 12  # "plk_" + 8 characters of the secret: enough to tell tokens apart in a list


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str  # shown once, never stored


def add_member(team: Team, user: AbstractBaseUser, role: str = Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(team=team, user=user, defaults={"role": role})
    return membership


def create_api_token(user: AbstractBaseUser, team: Team, name: str) -> IssuedToken:
    """A new token `plk_<43 url-safe chars>` (256 bits of entropy); only its sha256 is stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, team=team, name=name, prefix=secret[:PREFIX_LENGTH], key_hash=hash_token(secret)
    )
    return IssuedToken(token=token, secret=secret)


def revoke_api_token(token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def authenticate_token(secret: str) -> ApiToken | None:
    """The active token for `secret`, with its user and team; marks it used."""
    token = (
        ApiToken.objects.select_related("user", "team")
        .filter(key_hash=hash_token(secret), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is not None:
        now = timezone.now()
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
