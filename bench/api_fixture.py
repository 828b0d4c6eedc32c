"""The API bench's own world on the portal's database, broker and cluster: its instance label and
namespace prefix, its broker database, the GPU model and image of its workloads, and the load's
tenants; `seed_tenants` makes the tenants, grants, robot token and workloads the calls use,
`purge_broker` empties the bench's queues and `clean_up` deletes every namespace of the instance.
Also the ground of `bench/submit_profile.py`.
"""

from __future__ import annotations

import time

from django.contrib.auth import get_user_model
from django.utils import timezone

from catalog.models import Pool, ResourceClass
from portal.celery import app
from portal.metrics.collector import celery_queues
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.reconcile.specs import tenant_namespace
from scheduler.cluster.render.labels import INSTANCE_LABEL
from scheduler.workloads.models import Workload
from tenants.models import Membership, QuotaGrant, Tenant
from tenants.services import tokens as token_services

INSTANCE = "bench-api"
PREFIX = "benchapi-"
BROKER = "redis://127.0.0.1:6379/12"  # the bench's own broker database, purged at the end
MODEL = "H100-80GB"
IMAGE = "registry.k8s.io/pause:3.10"
LOAD_TENANTS = 50  # one CI pipeline per team: submits are spread over 50 tenants


def seed_tenants(rc: ResourceClass):
    """50 load tenants with a large grant each, and one tenant on the cluster for the
    submit-to-Running samples; a read-and-submit token of a robot that is a member of all."""
    User = get_user_model()
    robot = User.objects.create(username="bench-robot")
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"bl{i:02d}", name=f"Load {i}", allowed_priority_classes=["gpu-low"])
        for i in range(LOAD_TENANTS)
    )
    run_tenant = Tenant.objects.create(
        slug="run", name="Submit to Running", allowed_priority_classes=["gpu-low"]
    )
    tenants.append(run_tenant)
    Pool.objects.filter(resource_class=rc).update(capacity=1_000_000)
    now = timezone.now()
    QuotaGrant.objects.bulk_create(
        QuotaGrant(tenant=t, resource_class=rc, amount=100_000, starts_at=now) for t in tenants
    )
    Membership.objects.bulk_create(Membership(tenant=t, user=robot, role="member") for t in tenants)
    _, token = token_services.issue_token(
        actor=robot, user=robot, name="bench", scopes=["read", "submit"]
    )
    # Workloads for the status calls: 200 of them, pending, in the load tenants (rows only:
    # nothing is queued for the cluster).
    seeded = Workload.objects.bulk_create(
        Workload(
            tenant=tenants[i % LOAD_TENANTS],
            name=f"seed-{i}",
            kind="job",
            image=IMAGE,
            command=["python", "train.py"],
            resources={rc.slug: 1},
            gpu_model=rc.gpu_model,
            priority_class="gpu-low",
            namespace=tenant_namespace(tenants[i % LOAD_TENANTS]),
            k8s_name=f"seed-{i}",
            submitted_by=robot,
        )
        for i in range(200)
    )
    return run_tenant, token, [w.pk for w in seeded]


def purge_broker() -> None:
    with app.connection_for_write(BROKER) as conn:
        for queue in celery_queues():
            conn.default_channel.queue_purge(queue)


def clean_up(kube: KubeGateway, *, wait: bool = False) -> None:
    selector = f"{INSTANCE_LABEL}={INSTANCE}"
    for ns in kube.list("Namespace", label_selector=selector):
        kube.delete("Namespace", ns["metadata"]["name"])
    deadline = time.monotonic() + 90
    while wait and kube.list("Namespace", label_selector=selector):
        if time.monotonic() > deadline:
            raise TimeoutError("namespaces of a previous run are still being deleted")
        time.sleep(0.5)
