"""Base classes of every API view: tenant scoping through `visible_to(user)` and token scopes."""

from __future__ import annotations

from rest_framework import viewsets


class PortalViewSetMixin:
    """`get_queryset` is always the model's `visible_to(user)`: another tenant's object is a
    404, never a 403 that confirms it exists. `scopes` maps actions to the token scope they
    need (default: read for safe methods, `write_scope` for the rest)."""

    scopes: dict[str, str | None] = {}
    write_scope: str | None = None

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)  # type: ignore[misc]


class PortalReadOnlyViewSet(PortalViewSetMixin, viewsets.ReadOnlyModelViewSet):
    pass


class PortalGenericViewSet(PortalViewSetMixin, viewsets.GenericViewSet):
    pass
