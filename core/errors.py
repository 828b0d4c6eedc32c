"""Errors of the whole portal: services raise `ServiceError`s, which the web, API and admin faces
turn into 4xx answers; the cluster door raises `ClusterError`s, which tasks retry or record."""


class ServiceError(Exception):
    code = "invalid"
    status = 400

    def __init__(self, detail: str, *, field: str | None = None, code: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if code:
            self.code = code

    def as_dict(self) -> dict:
        data: dict = {"code": self.code, "detail": self.detail}
        if self.field:
            data["errors"] = {self.field: [self.detail]}
        return data


class InvalidInput(ServiceError):
    code = "invalid"


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
