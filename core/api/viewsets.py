"""Base classes of every API view: tenant scoping through `visible_to(user)` and token scopes."""

from __future__ import annotations

from rest_framework import viewsets

from core.api.scopes import TokenScope
from core.errors import InvalidInput
from core.permissions import is_platform_admin


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


class PlatformViewSet(PortalGenericViewSet):
    """The platform team's objects, keyed by resource class (pools, the approval policy):
    readable by platform admins only (others see an empty list and 404s); every write needs the
    `admin` scope from a token, and a platform admin behind it, which the service checks."""

    lookup_field = "resource_class__slug"
    lookup_url_kwarg = "resource_class"
    lookup_value_regex = r"[a-z0-9.-]+"
    write_scope = TokenScope.ADMIN
    http_method_names = ["get", "put", "patch", "head", "options"]

    def get_queryset(self):
        queryset = self.queryset.select_related("resource_class")  # type: ignore[union-attr]
        return queryset if is_platform_admin(self.request.user) else queryset.none()
