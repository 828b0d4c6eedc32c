from django.urls import path

from portal import approvals, console, gpu_health, sso_console

app_name = "console"

urlpatterns = [
    path("", approvals.queue, name="queue"),
    path("decide/", approvals.decide, name="decide"),
    path("capacity/", console.capacity, name="capacity"),
    path("tenants/", console.tenants_overview, name="tenants"),
    path("queues/", console.queues, name="queues"),
    path("health/", console.health, name="health"),
    path("health/reconcile/", console.reconcile_now, name="reconcile_now"),
    path("gpu-health/", gpu_health.gpu_health, name="gpu_health"),
    path("gpu-health/nodes/<str:node>/ack/", gpu_health.gpu_health_ack, name="gpu_health_ack"),
    path("gpu-health/rules/", gpu_health.gpu_health_rule, name="gpu_health_rule_add"),
    path("gpu-health/rules/<int:pk>/", gpu_health.gpu_health_rule, name="gpu_health_rule"),
    path("sso/", sso_console.sso, name="sso"),
    path("audit/", console.audit, name="audit"),
    path("plans/", console.plan_list, name="plan_list"),
    path("plans/new/", console.plan_create, name="plan_create"),
    path("plans/<int:pk>/", console.plan_detail, name="plan_detail"),
    path("plans/<int:pk>/apply/", console.plan_apply, name="plan_apply"),
    path("plans/<int:pk>/abandon/", console.plan_abandon, name="plan_abandon"),
]
