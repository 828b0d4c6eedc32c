"""/api/v1/ (the resources), /api/schema/ (OpenAPI 3) and /api/docs/ (Swagger UI, no CDN)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

app_name = "api"

urlpatterns = [
    path("v1/", include("tenants.api.urls")),
    path("v1/", include("scheduler.api.urls")),
    path("v1/", include("metering.api.urls")),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny]), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerView.as_view(url_name="api:schema", permission_classes=[AllowAny]),
        name="docs",
    ),
]
