from django.urls import path

from tenants import department_views, notification_views, renewal_views, team_calendar, views

app_name = "tenants"

urlpatterns = [
    path("departments/", department_views.department_list, name="department_list"),
    path("departments/<slug:slug>/", department_views.department_detail, name="department_detail"),
    path(
        "departments/<slug:slug>/decide/",
        department_views.department_decide,
        name="department_decide",
    ),
    path("teams/<slug:slug>/ask/", views.request_create, name="request_create"),
    path("teams/<slug:slug>/requests/", views.request_list, name="request_list"),
    path("teams/<slug:slug>/ask/preview/", views.request_preview, name="request_preview"),
    path("teams/<slug:slug>/calendar/", team_calendar.team_calendar, name="team_calendar"),
    path("teams/<slug:slug>/members/", views.member_add, name="member_add"),
    path("teams/<slug:slug>/members/<int:pk>/role/", views.member_role, name="member_role"),
    path("teams/<slug:slug>/members/<int:pk>/remove/", views.member_remove, name="member_remove"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
    path("requests/<int:pk>/", views.request_detail, name="request_detail"),
    path("requests/<int:pk>/cancel/", views.request_cancel, name="request_cancel"),
    path("grants/<int:pk>/extend/", renewal_views.grant_extend, name="grant_extend"),
    path(
        "teams/<slug:slug>/notifications/",
        notification_views.team_notifications,
        name="team_notifications",
    ),
    path(
        "platform/notifications/",
        notification_views.platform_notifications,
        name="platform_notifications",
    ),
    path(
        "notifications/channels/<int:pk>/test/",
        notification_views.channel_test,
        name="channel_test",
    ),
    path(
        "notifications/channels/<int:pk>/edit/",
        notification_views.channel_edit,
        name="channel_edit",
    ),
    path(
        "notifications/channels/<int:pk>/remove/",
        notification_views.channel_remove,
        name="channel_remove",
    ),
]
