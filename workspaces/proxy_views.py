"""What the workspace auth proxy asks the portal, over the cluster's network: POST
/workspaces/proxy/enter/ (a ticket for a session) and POST /workspaces/proxy/check/ (a session:
who, where, the server's secret). Only the proxy may ask (`X-Proxy-Token` equal to
WORKSPACE_PROXY_TOKEN, compared in constant time); answers are JSON `{code, detail}` on
refusal, never cached."""

from __future__ import annotations

import hmac
import json

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from workspaces import gate, tickets

TOKEN_HEADER = "HTTP_X_PROXY_TOKEN"


def _answer(data: dict, status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status)
    response["Cache-Control"] = "no-store"
    return response


def _refused(code: str, detail: str, status: int) -> JsonResponse:
    return _answer({"code": code, "detail": detail}, status)


def _asked(request, field: str):
    """(workspace id, the field's value) of the proxy's JSON body, or a 4xx answer."""
    expected = settings.WORKSPACE_PROXY_TOKEN
    if not expected:
        return _refused("proxy_not_configured", "set WORKSPACE_PROXY_TOKEN on the portal", 503)
    given = request.META.get(TOKEN_HEADER, "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return _refused("not_the_proxy", "only the workspace proxy asks here (X-Proxy-Token)", 403)
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return _refused("invalid", "the body must be JSON: {workspace, " + field + "}", 400)
    ws = body.get("workspace") if isinstance(body, dict) else None
    if isinstance(ws, bool) or not isinstance(ws, int):
        return _refused("invalid", "workspace: the workspace's id, a number", 400)
    return ws, body.get(field)


def _decided(request, field: str, decide) -> JsonResponse:
    asked = _asked(request, field)
    if isinstance(asked, JsonResponse):
        return asked
    workspace_id, value = asked
    try:
        return _answer(decide(workspace_id=workspace_id, **{field: value}))
    except tickets.Refused as exc:
        return _refused("refused", str(exc), 403)
    except ServiceError as exc:
        return _answer(exc.as_dict(), exc.status)


@csrf_exempt  # no browser posts here: the proxy, with its token
@require_POST
def proxy_enter(request):
    return _decided(request, "ticket", gate.enter)


@csrf_exempt
@require_POST
def proxy_check(request):
    return _decided(request, "session", gate.check)
