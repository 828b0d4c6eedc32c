"""/api/v1/ (the resources), /api/schema/ (OpenAPI 3) and /api/docs/ (Swagger UI, no CDN; its
start script comes from `/api/docs/?script=`, not inline, so the page keeps the portal's CSP)."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from core.api.exceptions import endpoint_not_found

app_name = "api"

urlpatterns = [
    path("v1/", include("tenants.api.urls")),
    path("v1/", include("catalog.api.urls")),
    path("v1/", include("scheduler.mig.api.urls")),
    path("v1/", include("scheduler.cluster.api.urls")),
    path("v1/", include("scheduler.workloads.api.urls")),
    path("v1/", include("workspaces.api.urls")),
    path("v1/", include("metering.api.urls")),
    path("schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny]), name="schema"),
    path(
        "docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="api:schema",
            permission_classes=[AllowAny],
            template_name="portal/swagger_ui.html",
        ),
        name="docs",
    ),
    # Last: every other path under /api/ ending in a slash is a JSON 404 (without the slash,
    # APPEND_SLASH redirects here first).
    re_path(r"^.*/$", endpoint_not_found, name="not_found"),
]
