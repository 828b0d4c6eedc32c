from django.contrib import admin

from scheduler.models import Pool, ResourceClass
from tenants import services


class PoolInline(admin.StackedInline):
    model = Pool
    can_delete = False
    readonly_fields = ["capacity", "overcommit_ratio", "source", "updated_at"]


@admin.register(ResourceClass)
class ResourceClassAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "gpu_model",
        "kind",
        "profile",
        "resource_name",
        "gpu_fraction",
        "price_per_hour",
        "active",
    ]
    list_filter = ["kind", "gpu_model", "active"]
    list_editable = ["price_per_hour", "active"]
    search_fields = ["slug", "gpu_model", "profile"]
    inlines = [PoolInline]


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ["resource_class", "capacity", "overcommit_ratio", "source", "updated_at"]
    list_filter = ["source"]
    list_editable = ["overcommit_ratio"]
    readonly_fields = ["source", "updated_at"]

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        services.set_pool(
            actor=request.user,
            resource_class=obj.resource_class,
            capacity=obj.capacity if "capacity" in form.changed_data else None,
            overcommit_ratio=obj.overcommit_ratio,
        )
