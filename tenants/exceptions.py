"""Errors that services raise; the web, API and admin faces turn them into 4xx answers."""


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
