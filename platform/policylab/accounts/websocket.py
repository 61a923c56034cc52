"""Who is on the other end of a websocket: a script with an API token, or a browser with its session.

A token (``Authorization: Bearer <token>`` in the handshake, or ``?token=<token>`` where a client cannot
set headers) acts for its user within the token's team only, exactly like the REST API: nothing ambient
is used, so no Origin is required. Without a token the browser's session cookie is used, and only from
an allowed Origin (a cookie is ambient: another site must not open the socket with it). An invalid or
revoked token is an anonymous connection, which the consumers refuse.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import AllowedHostsOriginValidator
from django.contrib.auth.models import AnonymousUser

from policylab.accounts.scoping import TOKEN_TEAM_ATTR
from policylab.accounts.services import authenticate_token


def token_from_scope(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, secret = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer" and secret.strip():
                return secret.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return (query.get("token") or [None])[0]


def user_for_token(secret: str) -> Any:
    token = authenticate_token(secret)
    if token is None:
        return AnonymousUser()
    user = token.user
    setattr(user, TOKEN_TEAM_ATTR, token.team_id)  # scoping.teams_of limits the connection to this team
    return user


class WebsocketAuth:
    """ASGI middleware in front of the websocket routes (see the module docstring)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.browser = AllowedHostsOriginValidator(AuthMiddlewareStack(inner))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        secret = token_from_scope(scope)
        if secret is None:
            return await self.browser(scope, receive, send)
        user = await database_sync_to_async(user_for_token)(secret)
        return await self.inner({**scope, "user": user}, receive, send)
