"""What a lost delete message leaves on the cluster: the Job or Deployment of a workload that
was cancelled (or whose row is gone). The cancel is in PostgreSQL; its delete task is a hint,
lost if Redis is flushed or the worker dies first. This periodic pass deletes what is left."""

from __future__ import annotations

import logging

from django.conf import settings

from core.tasks import portal_task
from scheduler.cluster import kube as kube_module
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.labels import INSTANCE_LABEL
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.lifecycle.sync import delete_from_cluster
from scheduler.workloads.models import Workload

log = logging.getLogger(__name__)


def delete_leftovers(kube: KubeGateway) -> list[str]:
    """Delete this portal's Jobs and Deployments whose workload is cancelled or unknown; one
    list call per kind, a delete only for what is left over. Returns what was deleted."""
    selector = f"{WORKLOAD_LABEL},{INSTANCE_LABEL}={settings.PORTAL_INSTANCE}"
    deleted = []
    for kind in ("Job", "Deployment"):
        objects = [
            o
            for o in kube.list(kind, label_selector=selector)
            if not o["metadata"].get("deletionTimestamp")
            and o["metadata"]["labels"][WORKLOAD_LABEL].isdigit()
        ]
        ids = {int(o["metadata"]["labels"][WORKLOAD_LABEL]) for o in objects}
        states = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "state"))
        for obj in objects:
            pk = int(obj["metadata"]["labels"][WORKLOAD_LABEL])
            name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
            if states.get(pk) == Workload.State.CANCELLED:
                gone = delete_from_cluster(kube, pk)
            elif pk not in states:
                gone = kube.delete(kind, name, ns, propagation="Foreground")
            else:
                continue
            if gone:
                deleted.append(f"{kind}/{ns}/{name}")
                log.info("deleted left-over %s/%s/%s of workload %s", kind, ns, name, pk)
    return deleted


@portal_task(name="scheduler.tasks.delete_leftover_workloads")
def delete_leftover_workloads() -> int:
    return len(delete_leftovers(kube_module.gateway()))
