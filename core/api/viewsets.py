"""Base classes of every API view: tenant scoping through `visible_to(user)` and token scopes."""

from __future__ import annotations

from rest_framework import viewsets

from core.errors import InvalidInput


class PortalViewSetMixin:
    """`get_queryset` is always the model's `visible_to(user)`: another tenant's object is a
    404, never a 403 that confirms it exists. `scopes` maps actions to the token scope they
    need (default: read for safe methods, `write_scope` for the rest)."""

    scopes: dict[str, str | None] = {}
    write_scope: str | None = None

    def get_queryset(self):
        return super().get_queryset().visible_to(self.request.user)  # type: ignore[misc]

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        # A lookup like `tenants/a%00b/` would reach PostgreSQL, which refuses NUL in text.
        for name, value in kwargs.items():
            if isinstance(value, str) and "\x00" in value:
                raise InvalidInput(
                    f"the URL's {name} has a NUL character (%00); remove it", field=name
                )


class PortalReadOnlyViewSet(PortalViewSetMixin, viewsets.ReadOnlyModelViewSet):
    pass


class PortalGenericViewSet(PortalViewSetMixin, viewsets.GenericViewSet):
    pass
