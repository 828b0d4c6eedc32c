from rest_framework.routers import SimpleRouter

from metering.api import views

router = SimpleRouter()
router.register("usage/statements", views.StatementViewSet, basename="statement")
router.register("usage/intervals", views.AllocationIntervalViewSet, basename="interval")
router.register("usage/budgets", views.BudgetViewSet, basename="budget")
router.register("usage/prices", views.PriceRuleViewSet, basename="pricerule")
router.register("usage/departments", views.DepartmentSpendViewSet, basename="department-spend")

urlpatterns = router.urls
