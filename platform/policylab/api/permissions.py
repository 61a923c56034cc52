"""Who may read what the API serves besides its endpoints."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.permissions import BasePermission


class SchemaReaders(BasePermission):
    """The OpenAPI document and its viewers: signed-in users and API tokens, like every endpoint it
    describes; anyone when the deployment opens it (settings.POLICYLAB_PUBLIC_API_SCHEMA)."""

    message = "sign in (or send an API token) to read the API schema"

    def has_permission(self, request: Any, view: Any) -> bool:
        return settings.POLICYLAB_PUBLIC_API_SCHEMA or bool(request.user and request.user.is_authenticated)
