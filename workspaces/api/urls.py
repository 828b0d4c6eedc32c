"""The workspaces API's routes."""

from rest_framework.routers import SimpleRouter

from workspaces.api import views

router = SimpleRouter()
router.register("workspaces", views.WorkspaceViewSet, basename="workspace")

urlpatterns = router.urls
