"""`Authorization: Bearer <token>` for CI pipelines and the CLI."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from tenants.services import tokens as token_services


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("give exactly one token after 'Bearer'")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("the token is not valid text") from None
        token = token_services.authenticate_token(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("the token is unknown, expired or revoked")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A portal API token (`gpp_…`); create one in the portal or with "
            "`manage.py issue_token`.",
        }
