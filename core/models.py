"""The ground layer's one table: the first answer to a creating API call, for idempotent retries.
It moved here from `tenants` with its table (`tenants_idempotencyrecord`) unchanged."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class IdempotencyRecord(models.Model):
    """The first answer to a creating POST with an Idempotency-Key, replayed on a retry."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=300)
    body_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "tenants_idempotencyrecord"
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="unique_idempotency_key")
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.key}]"
