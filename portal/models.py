from django.conf import settings
from django.db import models
from django.utils import timezone


class OIDCIdentity(models.Model):
    """A person at the single sign-on provider, bound to one portal account. The provider's
    subject (`sub`) is stable and never reassigned; a username or an e-mail is neither, so
    accounts are never matched by them (portal/oidc.py)."""

    issuer = models.CharField(max_length=255, help_text="The provider (OIDC_OP_ISSUER)")
    subject = models.CharField(max_length=255, help_text="The provider's `sub` claim")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_subject"),
            models.UniqueConstraint(fields=["issuer", "user"], name="oidc_identity_one_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
