"""The catalog in the Django admin: a class's price and on/off, a pool's capacity, overcommit
and cohort policy, each saved through the catalog's services (checked and audited there)."""

from django.contrib import admin

from catalog import services as catalog
from catalog.models import Pool, ResourceClass
from core.admin import ReadOnlyMixin, ServiceAdmin
from core.permissions import is_platform_admin


class PoolInline(ReadOnlyMixin, admin.StackedInline):
    """Shown only: a pool is changed on its own admin page, through `set_pool`."""

    model = Pool
    can_delete = False
    fields = readonly_fields = (
        "capacity",
        "overcommit_ratio",
        "borrowing_limit",
        "lend_idle",
        "source",
        "updated_at",
    )


@admin.register(ResourceClass)
class ResourceClassAdmin(ServiceAdmin):
    """Price and on/off are the platform team's to change (through `update_resource_class`: one
    audit event each); everything else is the catalog's, which creates the classes for the GPU
    models the inventory finds. So: no adding and no deleting here."""

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
    list_editable = list(catalog.EDITABLE_FIELDS)
    search_fields = ["slug", "gpu_model", "profile"]
    inlines = [PoolInline]

    def get_readonly_fields(self, request, obj=None):
        return [
            f.name
            for f in ResourceClass._meta.fields
            if f.editable and f.name not in catalog.EDITABLE_FIELDS
        ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # Only those the service lets through get a form (others see the class read-only).
        return super().has_change_permission(request, obj) and is_platform_admin(request.user)

    def save_model(self, request, obj, form, change):
        edits = {f: getattr(obj, f) for f in catalog.EDITABLE_FIELDS if f in form.changed_data}
        if edits:
            saved = catalog.update_resource_class(actor=request.user, resource_class=obj, **edits)
            for f in catalog.EDITABLE_FIELDS:
                setattr(obj, f, getattr(saved, f))


# Pool fields a form may leave out: the pool keeps what it has (or the default).
KEPT_WHEN_LEFT_OUT = (
    "max_grant_days",
    "idle_warn_after_s",
    "idle_suspend_after_s",
    "idle_protect_s",
)


@admin.register(Pool)
class PoolAdmin(ServiceAdmin):
    list_display = [
        "resource_class",
        "capacity",
        "overcommit_ratio",
        "borrowing_limit",
        "lend_idle",
        "reclaim_grace_s",
        "max_run_s",
        "max_grant_days",
        "idle_threshold_pct",
        "source",
        "outside_use",
        "updated_at",
    ]
    list_filter = ["source", "lend_idle"]
    list_editable = ["overcommit_ratio", "borrowing_limit", "lend_idle"]
    # the inventory sync's reading of the cluster, not the platform team's to set
    readonly_fields = ["source", "outside_use", "outside_namespaces", "updated_at"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in KEPT_WHEN_LEFT_OUT and field is not None:
            field.required = False  # a form sent without it keeps the pool's (or the default)
        return field

    def get_readonly_fields(self, request, obj=None):
        # set_pool keys on the class: re-pointing a pool would change another class's pool.
        return [*self.readonly_fields, "resource_class"] if obj else self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and is_platform_admin(request.user)

    def has_add_permission(self, request):
        return super().has_add_permission(request) and is_platform_admin(request.user)

    def save_model(self, request, obj, form, change):
        catalog.set_pool(
            actor=request.user,
            resource_class=obj.resource_class,
            capacity=obj.capacity if "capacity" in form.changed_data else None,
            overcommit_ratio=obj.overcommit_ratio,
            borrowing_limit=obj.borrowing_limit,
            lend_idle=obj.lend_idle,
            reclaim_grace_s=obj.reclaim_grace_s,
            max_run_s=obj.max_run_s,
            max_grant_days=obj.max_grant_days,
            idle_threshold_pct=obj.idle_threshold_pct,
            idle_warn_after_s=obj.idle_warn_after_s,
            idle_suspend_after_s=obj.idle_suspend_after_s,
            idle_protect_s=obj.idle_protect_s,
        )
