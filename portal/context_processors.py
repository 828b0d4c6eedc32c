from django.conf import settings

from catalog.slices import SLICE_RESOURCE
from core.permissions import is_platform_admin
from scheduler.cluster import kueue_settings, support


def portal(request):
    user = getattr(request, "user", None)
    admin = is_platform_admin(user) if user else False
    return {
        "is_platform_admin": admin,
        "oidc_enabled": settings.OIDC_ENABLED,
        # Kueue's name for a model's compute slices: queue tables say it in words
        "slice_resource": SLICE_RESOURCE,
        "currency": settings.BILLING_CURRENCY,
        # the route to the platform team wherever a page says to ask them (issue 49, 8)
        "platform_contact": {
            "url": settings.PLATFORM_CONTACT,
            "label": settings.PLATFORM_CONTACT.removeprefix("mailto:"),
        },
        "showback": settings.BILLING_MODE == "showback",
        # the last verdict on the cluster's versions (a banner below the floor); never asked here
        "cluster_support": support.remembered() if user and user.is_authenticated else None,
        # what Kueue's running Configuration lacks: the platform team's to set, so theirs to read
        "kueue_settings": kueue_settings.remembered() if admin else None,
    }
