"""DRF authentication with `Authorization: Bearer <token>`."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from policylab.accounts.scoping import TOKEN_TEAM_ATTR
from policylab.accounts.services import authenticate_token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != self.keyword.lower():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = authenticate_token(header[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        user = token.user
        setattr(user, TOKEN_TEAM_ATTR, token.team_id)  # scoping.teams_of limits the request to this team
        return user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "policylab.accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token from /api/tokens/"}
