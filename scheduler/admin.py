from django.contrib import admin

from core.admin import ReadOnlyAdmin, ServiceAdmin, run_each
from scheduler.cluster import inventory
from scheduler.cluster.models import Cluster, Node, ReconcileRun, TenantSyncState
from scheduler.cluster.tasks import reconcile_tenant
from scheduler.workloads.models import Workload, WorkloadEvent
from scheduler.workloads.services import cancel_workload


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
            lambda c: inventory.archive_cluster(actor=request.user, cluster=c),
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
