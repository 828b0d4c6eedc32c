"""The workspaces pages' routes."""

from django.urls import path

from workspaces import proxy_views, views

app_name = "workspaces"

urlpatterns = [
    path("teams/<slug:slug>/workspaces/", views.workspace_list, name="workspace_list"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="workspace_detail"),
    path("workspaces/<int:pk>/stop/", views.workspace_stop, name="workspace_stop"),
    path("workspaces/<int:pk>/restart/", views.workspace_restart, name="workspace_restart"),
    path("workspaces/<int:pk>/open/", views.workspace_open, name="workspace_open"),
    path("workspaces/<int:pk>/share/", views.workspace_share, name="workspace_share"),
    path("workspaces/<int:pk>/unshare/", views.workspace_unshare, name="workspace_unshare"),
    path("workspaces/proxy/enter/", proxy_views.proxy_enter, name="proxy_enter"),
    path("workspaces/proxy/check/", proxy_views.proxy_check, name="proxy_check"),
]
