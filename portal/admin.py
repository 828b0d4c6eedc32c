from django.contrib import admin

from core.admin import ReadOnlyAdmin
from portal.models import OIDCIdentity


@admin.register(OIDCIdentity)
class OIDCIdentityAdmin(ReadOnlyAdmin):
    """Who signs in to which account with single sign-on. Links are made by the first sign-in
    or by `manage.py link_oidc_identity` (audited), never typed in here."""

    list_display = ["user", "subject", "issuer", "created_at"]
    search_fields = ["user__username", "subject"]
    list_select_related = ["user"]
