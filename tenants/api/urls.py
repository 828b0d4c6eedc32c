from rest_framework.routers import SimpleRouter

from tenants.api import calendar, departments, notifications, platform, views

router = SimpleRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("departments", departments.DepartmentViewSet, basename="department")
router.register("members", views.MembershipViewSet, basename="membership")
router.register("capacity-requests", views.CapacityRequestViewSet, basename="capacityrequest")
router.register("grants", views.QuotaGrantViewSet, basename="quotagrant")
router.register("capacity-calendar", calendar.CapacityCalendarViewSet, basename="capacitycalendar")
router.register("tokens", views.ApiTokenViewSet, basename="apitoken")
router.register("audit-events", views.AuditEventViewSet, basename="auditevent")
router.register(
    "notification-channels",
    notifications.NotificationChannelViewSet,
    basename="notificationchannel",
)
router.register(
    "notification-deliveries",
    notifications.NotificationDeliveryViewSet,
    basename="notificationdelivery",
)
router.register(
    "auto-approval-rules", platform.AutoApprovalRuleViewSet, basename="autoapprovalrule"
)

urlpatterns = router.urls
