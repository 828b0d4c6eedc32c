from django.db import models


class Cluster(models.Model):
    """A Kubernetes cluster the portal manages (one for now: multi-cluster is a later step)."""

    name = models.CharField(max_length=63, unique=True)
    api_server = models.CharField(max_length=200, blank=True)
    kubeconfig_path = models.CharField(
        max_length=500, blank=True, help_text="Empty: the KUBECONFIG setting or in-cluster config"
    )
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_sync_error = models.TextField(blank=True)
    server_version = models.CharField(max_length=40, blank=True)

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """A GPU node as NVIDIA's device plugin and GPU feature discovery describe it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    gpu_model = models.CharField(max_length=64, blank=True, help_text="Catalog key")
    gpu_product = models.CharField(max_length=120, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    mig_strategy = models.CharField(max_length=20, blank=True)
    mig_config = models.CharField(max_length=63, blank=True)
    mig_config_state = models.CharField(max_length=20, blank=True)
    sharing_strategy = models.CharField(max_length=20, blank=True)
    sharing_replicas = models.PositiveIntegerField(default=1)
    device_plugin_config = models.CharField(max_length=63, blank=True)
    allocatable = models.JSONField(default=dict, help_text="GPU resource name -> count")
    labels = models.JSONField(default=dict)
    schedulable = models.BooleanField(default=True)
    ready = models.BooleanField(default=False)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_per_cluster")
        ]

    def __str__(self) -> str:
        return self.name


class PodAllocation(models.Model):
    """A pod bound to a node that holds GPU devices, as the last inventory sync saw it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="allocations")
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253, db_index=True)
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resources = models.JSONField(default=dict, help_text="GPU resource name -> units")
    phase = models.CharField(max_length=20)
    priority_class = models.CharField(max_length=63, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["node_name", "namespace", "pod_name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="unique_pod_allocation")
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} on {self.node_name}"
