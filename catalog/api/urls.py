"""The catalog's API routes: resource classes and pools."""

from rest_framework.routers import SimpleRouter

from catalog.api import views

router = SimpleRouter()
router.register("pools", views.PoolViewSet, basename="pool")

urlpatterns = router.urls
