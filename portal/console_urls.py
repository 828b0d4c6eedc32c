from django.urls import path

from portal import console

app_name = "console"

urlpatterns = [
    path("", console.queue, name="queue"),
    path("decide/", console.decide, name="decide"),
    path("capacity/", console.capacity, name="capacity"),
    path("tenants/", console.tenants_overview, name="tenants"),
    path("queues/", console.queues, name="queues"),
    path("health/", console.health, name="health"),
    path("audit/", console.audit, name="audit"),
    path("plans/", console.plan_list, name="plan_list"),
    path("plans/new/", console.plan_create, name="plan_create"),
    path("plans/<int:pk>/", console.plan_detail, name="plan_detail"),
    path("plans/<int:pk>/apply/", console.plan_apply, name="plan_apply"),
    path("plans/<int:pk>/abandon/", console.plan_abandon, name="plan_abandon"),
]
