"""The workloads pages' routes."""

from django.urls import path

from scheduler.workloads.pages import views

app_name = "scheduler"

urlpatterns = [
    path("teams/<slug:slug>/workloads/", views.workload_list, name="workload_list"),
    path("teams/<slug:slug>/workloads/new/", views.workload_create, name="workload_create"),
    path(
        "teams/<slug:slug>/workloads/new/preview/",
        views.workload_preview,
        name="workload_preview",
    ),
    path("workloads/<int:pk>/", views.workload_detail, name="workload_detail"),
    path("workloads/<int:pk>/logs/", views.workload_logs, name="workload_logs"),
    path("workloads/<int:pk>/pods/", views.workload_pods_panel, name="workload_pods"),
    path("workloads/<int:pk>/scaling/", views.workload_scaling_panel, name="workload_scaling"),
    path("workloads/<int:pk>/state/", views.workload_state, name="workload_state"),
    path("workloads/<int:pk>/cancel/", views.workload_cancel, name="workload_cancel"),
    path("workloads/<int:pk>/resume/", views.workload_resume, name="workload_resume"),
]
