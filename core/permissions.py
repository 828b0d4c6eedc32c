"""Who is a platform admin, and the page decorator that requires one. Roles inside a tenant are
governance (`tenants.permissions`); this is only about Django's users and groups."""

from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from core.errors import Forbidden


def is_platform_admin(user) -> bool:
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return user.is_staff and user.groups.filter(name=settings.PLATFORM_ADMIN_GROUP).exists()


def require_platform_admin(user, doing: str) -> None:
    """A service's guard: a 403 that says who may do it."""
    if not is_platform_admin(user):
        raise Forbidden(f"only platform admins may {doing}")


def platform_admin_required(view):
    @wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not is_platform_admin(request.user):
            raise PermissionDenied("the platform console is for platform admins")
        return view(request, *args, **kwargs)

    return wrapper
