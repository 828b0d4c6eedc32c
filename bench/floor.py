"""The floor of the API bench: the least an authenticated DRF call can cost on this stack.

The portal's defaults (Bearer token authentication, the scope permission, the per-token
throttle, JSON rendering, every middleware) and one query on a primary key; no serializer, no
tenant scoping. What a status or submit call costs beyond this is the portal's own work."""

from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import APIView

from scheduler.workloads.models import Workload


class FloorView(APIView):
    schema = None  # not in the OpenAPI document

    def get(self, request, pk: int):
        state = Workload.objects.filter(pk=pk).values_list("state", flat=True).first()
        return Response({"id": pk, "state": state})
