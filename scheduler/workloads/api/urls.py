"""The workloads API's routes: resource classes, workloads and their actions."""

from rest_framework.routers import SimpleRouter

from scheduler.workloads.api import views

router = SimpleRouter()
router.register("resource-classes", views.ResourceClassViewSet, basename="resourceclass")
router.register("workloads", views.WorkloadViewSet, basename="workload")

urlpatterns = router.urls
