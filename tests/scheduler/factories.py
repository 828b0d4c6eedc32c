import factory
from django.utils import timezone

from scheduler.cluster.models import Cluster, Node, PodAllocation


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
