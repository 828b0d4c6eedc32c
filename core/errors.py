"""Errors of the whole portal: services raise `ServiceError`s, which the web, API and admin faces
turn into 4xx answers; the cluster door raises `ClusterError`s, which tasks retry or record."""

from __future__ import annotations


class ServiceError(Exception):
    code = "invalid"
    status = 400

    def __init__(self, detail: str, *, field: str | None = None, code: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.errors: dict[str, list[str]] = {field: [detail]} if field else {}
        # (field, refusal) of every check that refused, when one answer says several
        self.refused: list[tuple[str, ServiceError]] = []
        if code:
            self.code = code

    def as_dict(self) -> dict:
        data: dict = {"code": self.code, "detail": self.detail}
        if self.errors:
            data["errors"] = self.errors
        return data


class InvalidInput(ServiceError):
    code = "invalid"

    @classmethod
    def of_fields(cls, errors: dict[str, list[str]]) -> InvalidInput:
        """Every bad field of one input at once: `errors` is field -> what is wrong with it; the
        detail says them all, the first field is `field` (a form puts a field-less one on top)."""
        detail = "; ".join(f"{name}: {' '.join(said)}" for name, said in errors.items())
        first = next(iter(errors))
        exc = cls(detail if len(errors) > 1 else errors[first][0], field=first)
        exc.errors = {name: list(said) for name, said in errors.items()}
        return exc


class Forbidden(ServiceError):
    code = "forbidden"
    status = 403


class NotFound(ServiceError):
    code = "not_found"
    status = 404


class InvalidTransition(ServiceError):
    code = "invalid_transition"
    status = 409


class CapacityExceeded(ServiceError):
    code = "capacity_exceeded"
    status = 409


class QuotaExceeded(ServiceError):
    code = "quota_exceeded"
    status = 409


# --- the cluster: raised by the one door to the API server, retried by the task decorator ------


class ClusterError(Exception):
    """Something went wrong talking to the Kubernetes API server."""


class TransientClusterError(ClusterError):
    """Worth retrying: connection refused, timeouts, 409 conflicts, 429, 5xx."""


class PermanentClusterError(ClusterError):
    """Retrying will not help: the object is invalid (422) or forbidden (403)."""
