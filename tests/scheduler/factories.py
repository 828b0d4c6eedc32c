import factory
from django.utils import timezone

from scheduler.cluster.models import Cluster, Node, PodAllocation
from tests.tenants.factories import TenantFactory, UserFactory


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = "local"


class NodeFactory(factory.django.DjangoModelFactory):
    """An inventory row as the sync writes it: an A100 node in the seed's mixed layout."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"gpu-node-{n}")
    gpu_model = "A100-80GB"
    gpu_product = "NVIDIA-A100-SXM4-80GB"
    gpu_count = 4
    mig_config = "mixed"
    mig_config_state = "success"
    sharing_strategy = "none"
    allocatable = factory.LazyFunction(dict)
    # as a GPU Operator node set up per docs/deploy.md: tainted, toolkit said to be set
    taints = factory.LazyFunction(lambda: ["nvidia.com/gpu"])
    labels = factory.LazyFunction(lambda: {"gpu-portal.io/devices-as-mounts": "true"})
    ready = True
    last_seen_at = factory.LazyFunction(timezone.now)


class PodAllocationFactory(factory.django.DjangoModelFactory):
    """A running pod holding GPUs on a node."""

    class Meta:
        model = PodAllocation

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Sequence(lambda n: f"uid-{n}")
    namespace = "team-a"
    pod_name = factory.Sequence(lambda n: f"pod-{n}")
    node_name = "gpu-node-0"
    resources = factory.LazyFunction(lambda: {"nvidia.com/mig-1g.10gb": 1})
    phase = "Running"
    seen_at = factory.LazyFunction(timezone.now)


class WorkloadFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "scheduler.Workload"

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"w-{n}")
    kind = "job"
    image = "busybox:1.36"
    resources = factory.LazyFunction(lambda: {"a100-80gb-mig-3g.40gb": 1})
    gpu_model = "A100-80GB"
    priority_class = "gpu-low"
    namespace = factory.LazyAttribute(lambda o: o.tenant.namespace)
    k8s_name = factory.LazyAttribute(lambda o: o.name)
    submitted_by = factory.SubFactory(UserFactory)
