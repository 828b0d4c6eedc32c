from django.urls import path

from portal import console

app_name = "console"

urlpatterns = [
    path("", console.queue, name="queue"),
    path("decide/", console.decide, name="decide"),
    path("capacity/", console.capacity, name="capacity"),
    path("tenants/", console.tenants_overview, name="tenants"),
    path("health/", console.health, name="health"),
    path("audit/", console.audit, name="audit"),
]
