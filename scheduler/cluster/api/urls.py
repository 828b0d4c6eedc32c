"""The clusters' API routes."""

from rest_framework.routers import SimpleRouter

from scheduler.cluster.api import views

router = SimpleRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")

urlpatterns = router.urls
