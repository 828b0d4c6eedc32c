"""Authenticated callers only; a token call also needs the scope its action asks for."""

from __future__ import annotations

from rest_framework import permissions

from core import audit
from core.permissions import is_platform_admin
from tenants.models import ApiToken

SAFE_METHODS = permissions.SAFE_METHODS


def token_allows(token: ApiToken, scope: str) -> bool:
    """Whether `token` may make a call that needs `scope`. `admin` covers every scope, and it
    holds only while the token's user is a platform admin: a tenant's token (its robot's, an
    owner's) never passes as admin, even if it somehow carried the scope."""
    if scope != ApiToken.Scope.ADMIN and token.has_scope(scope):
        return True
    return token.has_scope(ApiToken.Scope.ADMIN) and is_platform_admin(token.user)


def required_scope(request, view) -> str | None:
    """The scope a view's action needs: `view.scopes[action]`, else read for safe methods and
    `view.write_scope` for the rest. None: a token may not do this at all (browser only)."""
    action = getattr(view, "action", None)
    scopes = getattr(view, "scopes", {}) or {}
    if action in scopes:
        return scopes[action]
    if request.method in SAFE_METHODS:
        return ApiToken.Scope.READ
    return getattr(view, "write_scope", None)


class TokenScopePermission(permissions.BasePermission):
    message = "this token lacks the scope for this call"

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        token = request.auth
        if not isinstance(token, ApiToken):
            audit.act_through_token(None)
            return True  # a browser session: roles decide, in the services
        audit.act_through_token(token.name)
        scope = required_scope(request, view)
        if scope is None:
            self.message = "this call is not open to tokens; use the portal in a browser"
            return False
        if not token_allows(token, scope):
            self.message = f"this token lacks the scope {str(scope)!r} (it has {token.scopes})"
            return False
        return True
