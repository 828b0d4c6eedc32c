"""The one way to scope by tenant. Every tenant-owned model's queryset is a `TenantScopedQuerySet`
and answers `visible_to(user)`: platform admins see everything, other users what belongs to the
tenants they are members of, anonymous callers nothing. The API base view, the pages and the
selectors all scope through it; never fetch an object by id without it."""

from __future__ import annotations

from typing import Self

from django.db import models

from core.permissions import is_platform_admin


class TenantScopedQuerySet(models.QuerySet):
    # The path from the model to its tenant ("" for the tenant itself). A tenant has at most one
    # membership per user (a unique constraint), so the join never repeats a row.
    tenant_path = "tenant"

    def visible_to(self, user) -> Self:
        if is_platform_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        prefix = f"{self.tenant_path}__" if self.tenant_path else ""
        return self.filter(**{f"{prefix}memberships__user": user})
