from django.urls import path

from portal.console import approvals, calendar, clusters, departments, gpu_health, sso, views

app_name = "console"

urlpatterns = [
    path("", approvals.queue, name="queue"),
    path("decide/", approvals.decide, name="decide"),
    path("capacity/", views.capacity, name="capacity"),
    path("calendar/", calendar.calendar, name="calendar"),
    path("tenants/", views.tenants_overview, name="tenants"),
    path("departments/new/", departments.department_create, name="department_create"),
    path("queues/", views.queues, name="queues"),
    path("health/", views.health, name="health"),
    path("health/reconcile/", views.reconcile_now, name="reconcile_now"),
    path("clusters/", clusters.cluster_list, name="cluster_list"),
    path("clusters/<slug:name>/", clusters.cluster_detail, name="cluster_detail"),
    path("gpu-health/", gpu_health.gpu_health, name="gpu_health"),
    path("gpu-health/nodes/<str:node>/ack/", gpu_health.gpu_health_ack, name="gpu_health_ack"),
    path("gpu-health/rules/", gpu_health.gpu_health_rule, name="gpu_health_rule_add"),
    path("gpu-health/rules/<int:pk>/", gpu_health.gpu_health_rule, name="gpu_health_rule"),
    path("sso/", sso.sso, name="sso"),
    path("audit/", views.audit, name="audit"),
    path("plans/", views.plan_list, name="plan_list"),
    path("plans/new/", views.plan_create, name="plan_create"),
    path("plans/<int:pk>/", views.plan_detail, name="plan_detail"),
    path("plans/<int:pk>/apply/", views.plan_apply, name="plan_apply"),
    path("plans/<int:pk>/abandon/", views.plan_abandon, name="plan_abandon"),
]
