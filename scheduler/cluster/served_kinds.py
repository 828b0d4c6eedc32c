"""Where the API server serves each kind the portal reads or writes: its API path, its plural
and whether it lives in a namespace (`kube.py` builds its URLs from this table)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    api: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    namespaced: bool


KINDS: dict[str, Kind] = {
    "Namespace": Kind("/api/v1", "namespaces", False),
    "Node": Kind("/api/v1", "nodes", False),
    "Pod": Kind("/api/v1", "pods", True),
    "Event": Kind("/api/v1", "events", True),
    "ServiceAccount": Kind("/api/v1", "serviceaccounts", True),
    "ResourceQuota": Kind("/api/v1", "resourcequotas", True),
    "LimitRange": Kind("/api/v1", "limitranges", True),
    "ConfigMap": Kind("/api/v1", "configmaps", True),
    "Secret": Kind("/api/v1", "secrets", True),
    "Service": Kind("/api/v1", "services", True),
    "PersistentVolumeClaim": Kind("/api/v1", "persistentvolumeclaims", True),
    "Role": Kind("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": Kind("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "NetworkPolicy": Kind("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "Ingress": Kind("/apis/networking.k8s.io/v1", "ingresses", True),
    "PodDisruptionBudget": Kind("/apis/policy/v1", "poddisruptionbudgets", True),
    "PriorityClass": Kind("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "Job": Kind("/apis/batch/v1", "jobs", True),
    "Deployment": Kind("/apis/apps/v1", "deployments", True),
    "StatefulSet": Kind("/apis/apps/v1", "statefulsets", True),
    # frameworks' objects, followed when a team makes them (workloads/kinds/owners.py)
    "JobSet": Kind("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    "PyTorchJob": Kind("/apis/kubeflow.org/v1", "pytorchjobs", True),
    "RayJob": Kind("/apis/ray.io/v1", "rayjobs", True),
    "RayCluster": Kind("/apis/ray.io/v1", "rayclusters", True),
    "LeaderWorkerSet": Kind("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    "HorizontalPodAutoscaler": Kind("/apis/autoscaling/v2", "horizontalpodautoscalers", True),
    "ValidatingAdmissionPolicy": Kind(
        "/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False
    ),
    "ValidatingAdmissionPolicyBinding": Kind(
        "/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False
    ),
    # where the custom metrics API is served from (the local cluster's adapter registers one)
    "APIService": Kind("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    # read only: which Kueue the cluster runs (support.py) and which integrations' CRDs it
    # serves (kueue_settings.py)
    "CustomResourceDefinition": Kind(
        "/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False
    ),
    # Dynamic Resource Allocation (GPU models served through DRA: catalog/serving.py)
    "ResourceClaimTemplate": Kind("/apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "ResourceClaim": Kind("/apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceSlice": Kind("/apis/resource.k8s.io/v1", "resourceslices", False),
    "DeviceClass": Kind("/apis/resource.k8s.io/v1", "deviceclasses", False),
    # Kueue (v1beta2 is its storage version)
    "ResourceFlavor": Kind("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "ClusterQueue": Kind("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": Kind("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "Cohort": Kind("/apis/kueue.x-k8s.io/v1beta2", "cohorts", False),
    "WorkloadPriorityClass": Kind("/apis/kueue.x-k8s.io/v1beta2", "workloadpriorityclasses", False),
    "KueueWorkload": Kind("/apis/kueue.x-k8s.io/v1beta2", "workloads", True),
    # MultiKueue's, on a fleet's manager (render/multikueue.py)
    "AdmissionCheck": Kind("/apis/kueue.x-k8s.io/v1beta2", "admissionchecks", False),
    "MultiKueueConfig": Kind("/apis/kueue.x-k8s.io/v1beta2", "multikueueconfigs", False),
    "MultiKueueCluster": Kind("/apis/kueue.x-k8s.io/v1beta2", "multikueueclusters", False),
}
