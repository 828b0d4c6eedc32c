from rest_framework.routers import SimpleRouter

from scheduler.mig.api import views

router = SimpleRouter()
router.register("elastic-layouts", views.ElasticLayoutViewSet, basename="elastic-layout")

urlpatterns = router.urls
