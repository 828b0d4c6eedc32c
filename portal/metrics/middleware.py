"""HTTP request durations, by view (the URL pattern's name, never the raw path), method and
status: `RequestMetricsMiddleware`, near the top of MIDDLEWARE."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest

from portal.metrics.registry import HTTP_REQUEST_DURATION

# Known methods keep their name; anything else a client invents is one label value.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def view_label(request: HttpRequest) -> str:
    """The name of the URL pattern that answered (`tenant-detail`, `api:workload-list`), its route
    when it has no name; `static` for WhiteNoise's files, `unmatched` for no pattern at all. Never
    the path: one series per page, not per tenant or id."""
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return match.view_name or match.route or "unnamed"
    if request.path_info.startswith("/" + settings.STATIC_URL.lstrip("/")):
        return "static"
    return "unmatched"


class RequestMetricsMiddleware:
    """Observes each request's duration; placed near the top of MIDDLEWARE so that the time
    spent in the other middleware counts too."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        status = "500"
        try:
            response = self.get_response(request)
            status = str(response.status_code)
            return response
        finally:
            HTTP_REQUEST_DURATION.labels(
                view=view_label(request),
                method=request.method if request.method in _METHODS else "other",
                status=status,
            ).observe(time.perf_counter() - started)
