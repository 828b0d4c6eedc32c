"""Metering in the platform console: prices and budgets go through the services (audited)."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from metering import services
from metering.models import AllocationInterval, Budget, BudgetAlert, PriceRule, UsageRollup


@admin.register(PriceRule)
class PriceRuleAdmin(admin.ModelAdmin):
    list_display = ["resource_class", "price_per_hour", "effective_from", "created_by"]
    list_filter = ["resource_class__gpu_model"]
    fields = ["resource_class", "price_per_hour", "effective_from"]

    def save_model(self, request, obj, form, change):
        rule = services.set_price(
            actor=request.user,
            resource_class=obj.resource_class,
            price_per_hour=obj.price_per_hour,
            effective_from=obj.effective_from,
        )
        obj.pk = rule.pk

    def has_delete_permission(self, request, obj=None):
        return False  # statements already priced by a rule must not change behind people's back


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["tenant", "month", "amount"]
    list_filter = ["month"]
    fields = ["tenant", "month", "amount"]

    def save_model(self, request, obj, form, change):
        budget = services.set_budget(
            actor=request.user, tenant=obj.tenant, month=obj.month, amount=obj.amount
        )
        obj.pk = budget.pk

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AllocationInterval)
class AllocationIntervalAdmin(ReadOnlyAdmin):
    list_display = [
        "namespace",
        "pod_name",
        "tenant",
        "resource_class",
        "units",
        "started_at",
        "ended_at",
        "end_reason",
    ]
    list_filter = ["end_reason", "gpu_model"]
    search_fields = ["namespace", "pod_name", "pod_uid"]


@admin.register(UsageRollup)
class UsageRollupAdmin(ReadOnlyAdmin):
    list_display = [
        "period",
        "start",
        "tenant",
        "resource_class",
        "allocated_hours",
        "used_hours",
        "quota_hours",
    ]
    list_filter = ["period", "gpu_model"]


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ["tenant", "month", "threshold", "cost", "budget", "created_at"]
