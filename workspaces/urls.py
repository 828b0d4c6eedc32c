"""The workspaces pages' routes."""

from django.urls import path

from workspaces import views

app_name = "workspaces"

urlpatterns = [
    path("teams/<slug:slug>/workspaces/", views.workspace_list, name="workspace_list"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="workspace_detail"),
    path("workspaces/<int:pk>/stop/", views.workspace_stop, name="workspace_stop"),
    path("workspaces/<int:pk>/restart/", views.workspace_restart, name="workspace_restart"),
    path("workspaces/<int:pk>/auth/", views.workspace_auth, name="workspace_auth"),
]
