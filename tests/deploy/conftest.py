import uuid

import pytest

from localcluster import build, images, node_addons, node_stack, portal_account
from tests.deploy.chart_pods import helm, postgres_volume


@pytest.fixture
def release(kube_cluster, tmp_path):
    """A release name and namespace of the chart's, with a volume for its trial PostgreSQL;
    uninstalled afterwards with what its portal made for teams (by its instance label)."""
    bins = {**build.binaries(), **node_stack.binaries()}
    node_addons.build_and_load(bins, tuple(images.chart_images()))
    name = f"pods-{uuid.uuid4().hex[:6]}"
    namespace = f"helm-{name}"
    postgres_volume(kube_cluster.core, name)
    yield name, namespace
    helm("uninstall", name, "-n", namespace, "--ignore-not-found", "--wait", home=tmp_path)
    portal_account.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
    mine = f"gpu-portal.io/instance={namespace}"
    for kind in ("namespaces", "clusterqueues.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io"):
        portal_account.kubectl("delete", kind, "-l", mine, "--ignore-not-found", "--wait=false")
    kube_cluster.core.delete_persistent_volume(name)
