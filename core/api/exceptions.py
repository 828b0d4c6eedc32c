"""One exception handler: every error is JSON `{code, detail, errors}` with a stable code."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import (
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import Http404, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ServiceError


def _flatten(detail) -> dict:
    if isinstance(detail, dict):
        return {k: [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in detail.items()}
    if isinstance(detail, list):
        return {"non_field_errors": [str(m) for m in detail]}
    return {}


def _too_large(exc: SuspiciousOperation) -> tuple[int, dict] | None:
    """Django's refusals of a body too big to read (otherwise its HTML 400 page)."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        detail = f"the request body is larger than {limit} bytes; send a smaller body"
        return 413, {"code": "request_too_large", "detail": detail, "errors": {}}
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        detail = f"the request has too many fields or files ({exc}); send fewer"
        return 400, {"code": "too_many_fields", "detail": detail, "errors": {}}
    return None


def exception_handler(exc, context):
    if isinstance(exc, SuspiciousOperation) and (refused := _too_large(exc)):
        return Response(refused[1], status=refused[0])
    if isinstance(exc, ServiceError):
        data = exc.as_dict()
        data.setdefault("errors", {})
        return Response(data, status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("not found (or not yours to see)")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django answer 500 and log it
    if isinstance(exc, exceptions.ValidationError):
        response.data = {
            "code": "invalid",
            "detail": "the request has invalid fields",
            "errors": _flatten(exc.detail),
        }
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = exc.get_codes() if isinstance(exc, exceptions.APIException) else "error"
        response.data = {
            "code": code if isinstance(code, str) else "error",
            "detail": str(detail),
            "errors": {},
        }
        if response.status_code == status.HTTP_401_UNAUTHORIZED:
            response.data["code"] = "not_authenticated"
    return response


@csrf_exempt  # like every API view: a POST with a token is not refused as HTML for a CSRF cookie
def endpoint_not_found(request, *args, **kwargs) -> JsonResponse:
    """What any other path under /api/ answers (e.g. `/api/v1/workloads/0.5/`, which no route
    matches): the same JSON 404 as a missing object, never Django's HTML page."""
    return JsonResponse(
        {"code": "not_found", "detail": f"no such API endpoint: {request.path}", "errors": {}},
        status=404,
    )


def bad_request(request, exception, *args, **kwargs):
    """`handler400`: what Django itself refuses before or outside an API view (a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE, a host not in ALLOWED_HOSTS) is JSON under /api/ too; pages
    keep Django's own answer."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception, *args, **kwargs)
    if isinstance(exception, SuspiciousOperation) and (refused := _too_large(exception)):
        return JsonResponse(refused[1], status=refused[0])
    # The exception's text may quote the configuration (ALLOWED_HOSTS): not echoed.
    return JsonResponse(
        {
            "code": "bad_request",
            "detail": "the request was refused as malformed: check its Host header, "
            "its encoding and its size",
            "errors": {},
        },
        status=400,
    )
