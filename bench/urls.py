"""The portal's URLs plus the API bench's floor (never part of the product's URLs)."""

from django.urls import path

from bench.floor import FloorView
from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [
    path("api/v1/bench-floor/<int:pk>/", FloorView.as_view(), name="bench-floor"),
    *portal_urlpatterns,
]
