from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal import views
from portal.metrics import views as metrics_views

# Django's own 400s (a body over the upload limit, an unknown Host) are JSON under /api/.
handler400 = "core.api.exceptions.bad_request"
# An outage of the database, cache or broker is a 503 with Retry-After, never a 500.
handler500 = "portal.views.server_error"

admin.site.site_header = "GPU Portal — platform console"
admin.site.site_title = "GPU Portal console"
admin.site.index_title = "Capacity, tenants and audit"

urlpatterns = [
    path("", views.home, name="home"),
    path("start/", views.landing, name="landing"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics_views.metrics, name="metrics"),  # Prometheus; see portal/metrics/
    path("teams/<slug:slug>/", views.team_detail, name="team_detail"),
    path("", include("tenants.urls")),
    path("", include("metering.urls")),
    path("", include("scheduler.workloads.pages.urls")),
    path("", include("workspaces.urls")),
    path("console/", include("portal.console.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("portal.api.urls")),
]
if settings.OIDC_ENABLED:
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))
