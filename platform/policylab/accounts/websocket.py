"""Who is on the other end of a websocket: a script with an API token, or a browser with its session.

A token (``Authorization: Bearer <token>`` in the handshake, or ``?token=<token>`` where a client cannot
set headers) acts for its user within the token's team only, exactly like the REST API: nothing ambient
is used, so no Origin is required. Without a token the browser's session cookie is used, and only from
the socket's own origin (a cookie is ambient: another site must not open the socket with it): the
Origin header must name the same scheme, host AND port as the handshake, or an origin listed in
CSRF_TRUSTED_ORIGINS. An invalid or revoked token is an anonymous connection, which the consumers refuse.

Access is not settled once at the handshake: `current_user(scope)` answers who the connection acts for
NOW (the token still active, the session still signed in, the user still active), and the consumers ask
it again while the socket is open (tracking.access).
"""

from __future__ import annotations

from importlib import import_module
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host

from policylab.accounts.models import ApiToken
from policylab.accounts.scoping import TOKEN_TEAM_ATTR
from policylab.accounts.services import authenticate_token

TOKEN_ID_KEY = "api_token_id"  # the scope key of a token connection's ApiToken id
DEFAULT_PORTS = {"http": 80, "https": 443}


def token_from_scope(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, secret = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer" and secret.strip():
                return secret.strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return (query.get("token") or [None])[0]


def user_for_token(secret: str) -> tuple[Any, int | None]:
    """(the token's user, limited to the token's team; the token's id), or (AnonymousUser, None)."""
    token = authenticate_token(secret)
    if token is None:
        return AnonymousUser(), None
    user = token.user
    setattr(user, TOKEN_TEAM_ATTR, token.team_id)  # scoping.teams_of limits the connection to this team
    return user, token.pk


def current_user(scope: dict[str, Any]) -> Any | None:
    """Who the connection of `scope` acts for now, read afresh from the database (None: nobody any more):
    a token connection while its token is unrevoked and its user active; a browser while its session
    still holds the same user (not signed out, password unchanged, user active)."""
    token_id = scope.get(TOKEN_ID_KEY)
    if token_id is not None:
        token = (ApiToken.objects.select_related("user")
                 .filter(pk=token_id, revoked_at__isnull=True, user__is_active=True).first())
        if token is None:
            return None
        setattr(token.user, TOKEN_TEAM_ATTR, token.team_id)
        return token.user
    session, user = scope.get("session"), scope.get("user")
    session_key = getattr(session, "session_key", None)
    if session_key is None or user is None or not user.is_authenticated:
        return None
    fresh = get_user(SimpleNamespace(session=import_module(settings.SESSION_ENGINE).SessionStore(session_key)))
    return fresh if fresh.is_authenticated and fresh.pk == user.pk else None


# --- Origin ----------------------------------------------------------------------------------------------

def normal_origin(text: str) -> str | None:
    """`scheme://host[:port]` in lower case without the scheme's default port, or None if not an origin."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != DEFAULT_PORTS[parts.scheme] else "")


def header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def socket_origin(scope: dict[str, Any]) -> str | None:
    """The origin of the handshake itself: https for wss (or behind a proxy that says so through
    SECURE_PROXY_SSL_HEADER), the Host header's host and port; None when the host is not allowed."""
    host = header(scope, b"host")
    if not host:
        return None
    domain, _ = split_domain_port(host.lower())
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name, value = proxy
        forwarded = header(scope, name.removeprefix("HTTP_").lower().replace("_", "-").encode())
        secure = secure or (forwarded or "").split(",")[0].strip() == value
    return normal_origin(f"{'https' if secure else 'http'}://{host}")


def origin_allowed(scope: dict[str, Any]) -> bool:
    """The Origin header names the socket's own scheme, host and port, or a CSRF_TRUSTED_ORIGINS entry."""
    origin = normal_origin(header(scope, b"origin") or "")
    if origin is None:
        return False
    trusted = {normal_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    return origin == socket_origin(scope) or origin in trusted


class SameOriginValidator:
    """Refuses the handshake (403) unless origin_allowed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)


class WebsocketAuth:
    """ASGI middleware in front of the websocket routes (see the module docstring)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.browser = SameOriginValidator(AuthMiddlewareStack(inner))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        secret = token_from_scope(scope)
        if secret is None:
            return await self.browser(scope, receive, send)
        user, token_id = await database_sync_to_async(user_for_token)(secret)
        return await self.inner({**scope, "user": user, TOKEN_ID_KEY: token_id}, receive, send)
