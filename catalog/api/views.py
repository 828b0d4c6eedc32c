"""Pools by API, for platform automation (a platform admin's session, or a token with the
`admin` scope). Every write goes through the catalog's services, the ones the admin console
uses, so it is checked and audited the same way."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.response import Response

from catalog import services as catalog
from catalog.api.serializers import PoolSerializer, PoolUpdateSerializer
from catalog.models import Pool, ResourceClass
from core.api.viewsets import PlatformViewSet
from core.errors import NotFound


def resource_class_by_slug(slug: str) -> ResourceClass:
    """The class a platform URL names, or a 404 that says which."""
    resource_class = ResourceClass.objects.filter(slug=slug).first()
    if resource_class is None:
        raise NotFound(f"no resource class {slug!r}", field="resource_class")
    return resource_class


class PoolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """Pools: capacity, overcommit and cohort policy per resource class."""

    queryset = Pool.objects.all()
    serializer_class = PoolSerializer

    @extend_schema(request=PoolUpdateSerializer, responses=PoolSerializer)
    def partial_update(self, request, resource_class=None):
        data = PoolUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        pool = catalog.set_pool(
            actor=request.user,
            resource_class=resource_class_by_slug(resource_class),
            **data.validated_data,
        )
        return Response(PoolSerializer(pool).data)

    @extend_schema(request=PoolUpdateSerializer, responses=PoolSerializer)
    def update(self, request, resource_class=None):
        """Set a pool (created for the class when it has none yet)."""
        return self.partial_update(request, resource_class=resource_class)
