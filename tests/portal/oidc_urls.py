"""The portal's URLs with single sign-on's, for tests that turn it on in-process (settings read
at start-up add them only when OIDC_RP_CLIENT_ID is set)."""

from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [path("oidc/", include("mozilla_django_oidc.urls")), *portal_urlpatterns]
