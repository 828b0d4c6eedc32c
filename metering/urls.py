from django.urls import path

from metering import views

app_name = "metering"

urlpatterns = [
    path("usage/platform/", views.platform_usage, name="platform_usage"),
    path(
        "usage/platform/chargeback.<str:fmt>",
        views.chargeback_export,
        name="chargeback_export",
    ),
    path(
        "usage/platform/<str:by>.<str:fmt>",
        views.roll_up_export,
        name="roll_up_export",
    ),
    path("usage/teams/<slug:slug>/", views.team_usage, name="team_usage"),
    path("usage/departments/<slug:slug>/", views.department_usage, name="department_usage"),
    path("usage/teams/<slug:slug>/budget/", views.team_budget, name="team_budget"),
    path(
        "usage/teams/<slug:slug>/statement.<str:fmt>",
        views.team_statement_export,
        name="team_statement_export",
    ),
]
