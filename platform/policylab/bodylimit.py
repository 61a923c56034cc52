"""Request bodies capped at settings.DATA_UPLOAD_MAX_MEMORY_SIZE whatever the transfer encoding (issue 34).

The Content-Length check (middleware.RequestSizeLimitMiddleware) cannot see a chunked body, and by the
time any Django middleware runs, the server has read the body already. So the cap is kept where the
bytes arrive, counting them:

- `cap_daphne_request_bodies()`: daphne (our ASGI server) reads a whole request body into a temporary
  file before it starts the application, then queues all of it in memory at once. Its request class
  is replaced by one that counts the body's bytes as they come off the socket and, at the first byte
  past the limit (or at a Content-Length past it), answers 413 and closes the connection: the rest is
  never read, stored or queued. Twisted's own 400 for a malformed request works the same way.
- `BodySizeLimit`: ASGI middleware for servers that stream the body to the application (uvicorn,
  hypercorn, in-process test communicators): it counts `http.request` bytes and answers 413 before
  Django has read past the limit.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from django.conf import settings

from policylab.api.errors import error_body

API_PREFIX = "/api/"


def body_limit() -> int | None:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large(path: str, limit: int, *, wants_json: bool = False) -> tuple[bytes, bytes]:
    """(content type, body) of the 413 answer: the API's error shape under /api/, plain text elsewhere."""
    message = f"request body is larger than {limit} bytes"
    if wants_json or path.startswith(API_PREFIX):
        return b"application/json", json.dumps(error_body(message)).encode()
    return b"text/plain; charset=utf-8", message.encode()


def declared_length(headers: list[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


class BodySizeLimit:
    """ASGI middleware: 413 once an HTTP request's body passes the limit, counted as it arrives (see the
    module docstring). A body under the limit is held (as Django would hold it) and handed on unchanged."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        limit = body_limit()
        if scope["type"] != "http" or limit is None:
            return await self.app(scope, receive, send)
        if declared_length(scope.get("headers", [])) > limit:
            return await self.refuse(scope, send, limit)
        held: deque[dict[str, Any]] = deque()
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":  # the client left before the body ended
                break
            size += len(message.get("body", b""))
            if size > limit:
                return await self.refuse(scope, send, limit)
            if not message.get("more_body", False):
                break

        async def replay() -> dict[str, Any]:
            return held.popleft() if held else await receive()

        return await self.app(scope, replay, send)

    @staticmethod
    async def refuse(scope: dict[str, Any], send: Any, limit: int) -> None:
        fetch = any(name == b"x-requested-with" and value == b"fetch" for name, value in scope.get("headers", []))
        content_type, body = too_large(scope.get("path", ""), limit, wants_json=fetch)
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", content_type), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def cap_daphne_request_bodies() -> None:
    """Make daphne count each request body's bytes as they arrive and refuse it past the limit (see the
    module docstring). Idempotent; nothing happens where daphne is not installed."""
    try:
        from daphne import http_protocol
    except ImportError:
        return
    if getattr(http_protocol.WebRequest, "body_limit_capped", False):
        return

    class CappedWebRequest(http_protocol.WebRequest):
        body_limit_capped = True
        body_bytes = 0
        refused = False

        def gotLength(self, length: int | None) -> None:
            super().gotLength(length)
            limit = body_limit()
            if length is not None and limit is not None and length > limit:
                self.requestHeaders.removeHeader(b"Expect")  # no "100 Continue" after the refusal
                self.refuse(limit)

        def handleContentChunk(self, data: bytes) -> None:
            if self.refused:
                return
            self.body_bytes += len(data)
            limit = body_limit()
            if limit is not None and self.body_bytes > limit:
                self.refuse(limit)
                return
            super().handleContentChunk(data)

        def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
            if not self.refused:  # a refused request never reaches the application
                super().requestReceived(command, path, version)

        def refuse(self, limit: int) -> None:
            """Answer 413 and close: Twisted stops reading the socket, so the rest of the body is never read."""
            self.refused = True
            path = getattr(self.channel, "_path", b"").split(b"?")[0].decode("latin-1")
            fetch = self.requestHeaders.getRawHeaders(b"X-Requested-With") == [b"fetch"]
            content_type, body = too_large(path, limit, wants_json=fetch)
            self.channel.transport.write(
                b"HTTP/1.1 413 Content Too Large\r\nContent-Type: " + content_type
                + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
            )
            self.channel.loseConnection()

    http_protocol.WebRequest = CappedWebRequest
