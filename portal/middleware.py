import re

from django.urls import get_script_prefix, resolve, reverse

from core import audit
from core.request_context import new_request_id, set_request_id

# Accept a caller's id (a load balancer's or a CI job's) only when it looks like one.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


class RequestIdMiddleware:
    header = "HTTP_X_REQUEST_ID"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.META.get(self.header, "")
        request_id = incoming if _SAFE_ID.match(incoming) else new_request_id()
        request.request_id = request_id
        set_request_id(request_id)
        # A token's name labels this request's audit rows only when the API's permission check
        # names it now: never one left from an earlier request on this thread with the same id.
        audit.act_through_token(None)
        try:
            response = self.get_response(request)
        finally:
            set_request_id(None)
            audit.act_through_token(None)
        response["X-Request-ID"] = request_id
        return response


# URL names answered whatever the Host header says: the kubelet's probes and Prometheus reach a
# pod by its IP address, which ALLOWED_HOSTS does not list (Django would answer 400).
HOST_FREE_URL_NAMES = ("healthz", "readyz", "metrics")


class HostFreeProbesMiddleware:
    """Before every middleware that reads the Host: serves the probe and metrics paths itself
    (Django checks the Host against ALLOWED_HOSTS only when `request.get_host()` is called, by
    the middleware below and the views). Every other path goes on, and is checked, as before."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self._matches: dict | None = None

    def _host_free_matches(self) -> dict:
        if self._matches is None:
            # Paths as `request.path_info` spells them: without the script prefix.
            prefix_len = len(get_script_prefix()) - 1
            paths = [reverse(name)[prefix_len:] for name in HOST_FREE_URL_NAMES]
            self._matches = {path: resolve(path) for path in paths}
        return self._matches

    def __call__(self, request):
        match = self._host_free_matches().get(request.path_info)
        if match is None:
            return self.get_response(request)
        request.resolver_match = match  # what the request metrics label it with
        return match.func(request, *match.args, **match.kwargs)
