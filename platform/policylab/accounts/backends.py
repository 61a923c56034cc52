"""Authentication backends: django-axes' lockout check, for sign-ins that come from a request."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.http import HttpRequest


class LoginThrottleBackend(AxesStandaloneBackend):
    """Refuses a sign-in while its (username, address) is locked out (settings.AXES_*).

    `authenticate()` without a request (Django's test client `login()`, management commands) is no
    web sign-in and has no address to count: it is left to the next backend, where axes itself would
    raise AxesBackendRequestParameterRequired."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)
