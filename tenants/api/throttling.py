"""Throttling per token (each CI pipeline has its own budget), else per user."""

from __future__ import annotations

from rest_framework.throttling import SimpleRateThrottle

from tenants.models import ApiToken


class PerTokenThrottle(SimpleRateThrottle):
    scope = "per_token"

    def get_cache_key(self, request, view):
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"anon-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
