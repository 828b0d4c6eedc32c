"""The OpenAPI schema documents every error the API answers with, not only the happy path: each
operation lists the JSON error body `{code, detail, errors}` under the statuses it can return."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse, inline_serializer
from rest_framework import serializers

# Inline: a Serializer cannot declare a field named `errors` (its own attribute).
ERROR_BODY = inline_serializer(
    name="Error",
    fields={
        "code": serializers.CharField(help_text="stable, e.g. `quota_exceeded`"),
        "detail": serializers.CharField(help_text="for people"),
        "errors": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            help_text="field -> messages (empty when no field is to blame)",
        ),
    },
)


ERRORS = {
    "400": "`invalid` (field errors; also a NUL character in a key, a value or the URL), "
    "`parse_error` (not JSON, or nested too deep), `too_many_fields`, `image_not_allowed`, "
    "`priority_not_allowed`",
    "401": "`not_authenticated`: no, an unknown, an expired or a revoked token",
    "403": "`permission_denied`: the token lacks the scope, or the role does not allow it",
    "404": "`not_found`: no such object, or not yours to see (also a page past the end)",
    "409": "`invalid_transition`, `quota_exceeded`, `capacity_exceeded`, "
    "`idempotency_key_reused`, `secret_shown_once`, `logs_unavailable`",
    "413": "`request_too_large`: the body is over the upload limit",
    "429": "`throttled`: too many calls for this token",
}
# Statuses only a call that sends a body can meet.
BODY_ONLY = frozenset({"413"})
# 409 on reads: only where a read depends on the cluster's state.
READS_WITH_CONFLICTS = frozenset({"logs"})


class PortalAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        safe = self.method.upper() in ("GET", "HEAD", "OPTIONS")
        action = getattr(self.view, "action", None)
        for code, description in ERRORS.items():
            if code == "409" and safe and action not in READS_WITH_CONFLICTS:
                continue
            if code in BODY_ONLY and safe:
                continue
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    OpenApiResponse(ERROR_BODY, description=description),
                    code,
                    direction=direction,
                )
        return responses
