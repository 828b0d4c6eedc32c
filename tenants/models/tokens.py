"""API tokens: bearer tokens (stored as a hash), their scopes, and who may see which."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.api.scopes import TokenScope
from core.permissions import is_platform_admin
from tenants.models.tenants import Membership, Tenant


class ApiTokenQuerySet(models.QuerySet):
    def visible_to(self, user) -> ApiTokenQuerySet:
        """The one token-visibility rule, for the tokens page, the API and every revoke path:
        a user sees their own tokens and those of the CI robot of every tenant they own;
        platform admins see all; anonymous callers none. It is exactly what `revoke_token`
        lets the user revoke (own, robot of an owned tenant, anything for platform admins)."""
        if is_platform_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        owned_robots = Tenant.objects.filter(
            robot__isnull=False,
            memberships__user=user,
            memberships__role=Membership.Role.OWNER,
        ).values("robot_id")
        return self.filter(Q(user=user) | Q(user_id__in=owned_robots))

    def usable(self, now=None) -> ApiTokenQuerySet:
        now = now or timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A bearer token: shown once, stored as a sha256 hash, with a visible prefix."""

    Scope = TokenScope  # the words are the ground floor's (core/api/scopes.py)

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, db_index=True, help_text="Visible start of the token")
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])


# --- notifications -----------------------------------------------------------------------------
