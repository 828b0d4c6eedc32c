from django.conf import settings

from core.permissions import is_platform_admin


def portal(request):
    user = getattr(request, "user", None)
    return {
        "is_platform_admin": is_platform_admin(user) if user else False,
        "oidc_enabled": settings.OIDC_ENABLED,
    }
