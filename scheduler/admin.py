from django.contrib import admin

from core.admin import ReadOnlyAdmin, ReadOnlyMixin, ServiceAdmin, run_each
from core.permissions import is_platform_admin
from scheduler.catalog.models import Pool, ResourceClass
from scheduler.cluster import inventory_sync
from scheduler.cluster.models import Cluster, Node, ReconcileRun, TenantSyncState
from scheduler.cluster.tasks import reconcile_tenant
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.services import cancel_workload
from tenants import classes
from tenants.services import pools as pool_services


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
    list_editable = list(classes.EDITABLE_FIELDS)
    search_fields = ["slug", "gpu_model", "profile"]
    inlines = [PoolInline]

    def get_readonly_fields(self, request, obj=None):
        return [
            f.name
            for f in ResourceClass._meta.fields
            if f.editable and f.name not in classes.EDITABLE_FIELDS
        ]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # Only those the service lets through get a form (others see the class read-only).
        return super().has_change_permission(request, obj) and is_platform_admin(request.user)

    def save_model(self, request, obj, form, change):
        edits = {f: getattr(obj, f) for f in classes.EDITABLE_FIELDS if f in form.changed_data}
        if edits:
            saved = classes.update_resource_class(actor=request.user, resource_class=obj, **edits)
            for f in classes.EDITABLE_FIELDS:
                setattr(obj, f, getattr(saved, f))


@admin.register(Pool)
class PoolAdmin(ServiceAdmin):
    list_display = [
        "resource_class",
        "capacity",
        "overcommit_ratio",
        "borrowing_limit",
        "lend_idle",
        "source",
        "updated_at",
    ]
    list_filter = ["source", "lend_idle"]
    list_editable = ["overcommit_ratio", "borrowing_limit", "lend_idle"]
    readonly_fields = ["source", "updated_at"]

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
        pool_services.set_pool(
            actor=request.user,
            resource_class=obj.resource_class,
            capacity=obj.capacity if "capacity" in form.changed_data else None,
            overcommit_ratio=obj.overcommit_ratio,
            borrowing_limit=obj.borrowing_limit,
            lend_idle=obj.lend_idle,
        )


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    """Written by the inventory sync only; never deleted (usage and statements point at it):
    a cluster the portal no longer manages is archived, through `archive_cluster`."""

    list_display = [
        "name",
        "api_server",
        "server_version",
        "last_sync_at",
        "last_sync_error",
        "archived_at",
    ]
    actions = ["archive"]

    @admin.action(description="Archive (keeps its usage history)")
    def archive(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Archived",
            lambda c: inventory_sync.archive_cluster(actor=request.user, cluster=c),
        )


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    """GPU nodes as the last inventory sync saw them (read-only: the cluster is the truth)."""

    list_display = [
        "name",
        "gpu_model",
        "gpu_count",
        "mig_strategy",
        "mig_config",
        "mig_config_state",
        "sharing_strategy",
        "gpu_resources",
        "schedulable",
        "ready",
        "last_seen_at",
    ]
    list_filter = ["gpu_model", "mig_config", "sharing_strategy", "schedulable", "ready"]
    search_fields = ["name", "gpu_product"]

    @admin.display(description="GPU resources")
    def gpu_resources(self, obj):
        return ", ".join(
            f"{k.removeprefix('nvidia.com/')}: {v}" for k, v in obj.allocatable.items()
        )


@admin.register(TenantSyncState)
class TenantSyncStateAdmin(ServiceAdmin):
    list_display = ["tenant", "status", "last_run_at", "last_success_at", "last_error"]
    list_filter = ["status"]
    readonly_fields = ["tenant", "status", "last_run_at", "last_success_at", "last_error"]
    exclude = ["applied_hashes"]
    actions = ["reconcile_now"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Reconcile selected tenants now")
    def reconcile_now(self, request, queryset):
        for state in queryset:
            reconcile_tenant.apply_async(kwargs={"tenant_id": state.tenant_id})
        self.message_user(request, f"Queued a reconcile of {queryset.count()} tenants.")


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = [
        "started_at",
        "tenant",
        "trigger",
        "status",
        "objects_changed",
        "drift_found",
        "writes",
        "api_calls",
        "error",
    ]
    list_filter = ["status", "trigger", "tenant"]
    date_hierarchy = "started_at"

    @admin.display(description="drift", boolean=True)
    def drift_found(self, obj):
        return bool(obj.drift)


class WorkloadEventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "state", "reason", "message"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    """Read-only: workloads are submitted by teams; the platform team may cancel them."""

    list_display = ["name", "tenant", "kind", "state", "priority_class", "gpu_model", "created_at"]
    list_filter = ["state", "kind", "priority_class", "tenant"]
    search_fields = ["name", "tenant__slug", "k8s_name"]
    list_select_related = ["tenant"]
    inlines = [WorkloadEventInline]
    actions = ["cancel"]

    @admin.action(description="Cancel selected workloads")
    def cancel(self, request, queryset):
        run_each(
            self,
            request,
            queryset,
            "Cancelled",
            lambda w: cancel_workload(actor=request.user, workload=w),
        )
