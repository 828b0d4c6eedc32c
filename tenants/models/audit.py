"""The audit log: one append-only event per state change, scoped to its tenant."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from core.querysets import TenantScopedQuerySet
from tenants.models.tenants import Tenant


class AuditEventQuerySet(TenantScopedQuerySet):
    """Events of the caller's tenants; events without a tenant are the platform team's."""


class AuditEvent(models.Model):
    """Append-only: a database trigger refuses UPDATE and DELETE (migrations 0002, 0012) but for
    the three sanctioned writes of `tenants.audit_chain`: sealing a row into the hash chain,
    erasing a person's data from it, and the retention purge of the chain's oldest rows."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    actor_repr = models.CharField(max_length=150, help_text="Who, as it was at the time")
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="audit_events",
    )
    verb = models.CharField(max_length=60, db_index=True)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True, db_index=True)
    # The hash chain (tenants/audit_chain.py), filled by the sealer after the row is committed.
    chain_seq = models.BigIntegerField(null=True, blank=True, unique=True)
    chain_digest = models.CharField(max_length=64, blank=True)
    # What the chain hashes of actor_repr, object_repr, before and after: a salted digest, so
    # those may be erased (salt dropped) without breaking the chain.
    content_digest = models.CharField(max_length=64, blank=True)
    content_salt = models.CharField(max_length=32, blank=True)
    erased_by = models.BigIntegerField(null=True, blank=True, help_text="The person.erased event")

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_repr} {self.verb} {self.object_repr}"

    def clean(self) -> None:
        if not self.verb:
            raise ValidationError("verb is required")


# --- API tokens --------------------------------------------------------------------------------
