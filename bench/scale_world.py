"""The scale benches' world in PostgreSQL: teams in departments with grants, members and stored
queue summaries, and workloads (a fifth of them in one big team, the rest spread over the
teams), plus the cluster's view of those workloads as plain dicts for a stand-in gateway. Seeded
in steps, so that one database grows from the small size to the large one."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from scheduler.cluster.models import TenantSyncState
from scheduler.workloads.kinds.manifests import KUEUE_JOB_UID_LABEL
from scheduler.workloads.kinds.pod_template import WORKLOAD_LABEL
from scheduler.workloads.models import Workload
from tenants.models import Department, Membership, QuotaGrant, Tenant

MODELS = ["A100-80GB", "H100-80GB", "H200-141GB", "L40S-48GB", "RTX4090-24GB"]
DEPARTMENTS = 10
BIG_SHARE = 5  # one workload in BIG_SHARE is the big team's (one namespace of W / 5)


def seed_tenants(
    start: int, stop: int, *, departments: int = DEPARTMENTS, grant: tuple[str, int] | None = None
) -> None:
    """Teams start..stop-1 (t00000…), each in one of the departments, 1-4 grants (or the one
    `grant`: class slug, units), an owner and a member, and a stored queue summary in which
    some borrow and some lend."""
    rng = random.Random(start)
    ensure_resource_classes(MODELS)
    classes = list(ResourceClass.objects.filter(active=True))
    depts = list(Department.objects.order_by("pk"))
    if not depts:
        depts = Department.objects.bulk_create(
            Department(slug=f"dept{d}", name=f"Department {d}") for d in range(departments)
        )
    User = get_user_model()
    users = User.objects.bulk_create(
        User(username=f"scale-{i}-{r}") for i in range(start, stop) for r in ("o", "m")
    )
    tenants = Tenant.objects.bulk_create(
        Tenant(
            slug=f"t{i:05d}",
            name=f"Scale team {i}",
            department=depts[i % len(depts)],
            allowed_priority_classes=["gpu-high", "gpu-low"],
        )
        for i in range(start, stop)
    )
    now = timezone.now()
    grants, members, states = [], [], []
    for k, tenant in enumerate(tenants):
        picked = (
            [(next(c for c in classes if c.slug == grant[0]), grant[1])]
            if grant
            else [(rc, rng.randint(1, 8)) for rc in rng.sample(classes, rng.randint(1, 4))]
        )
        for rc, units in picked:
            ends = now + timedelta(days=rng.randint(1, 90)) if rng.random() < 0.7 else None
            grants.append(
                QuotaGrant(
                    tenant=tenant,
                    resource_class=rc,
                    amount=units,
                    starts_at=now - timedelta(days=1),
                    ends_at=ends,
                )
            )
        members += [
            Membership(tenant=tenant, user=users[2 * k], role="owner"),
            Membership(tenant=tenant, user=users[2 * k + 1], role="member"),
        ]
        borrowed = rng.randint(1, 4) if rng.random() < 0.3 else 0
        lent = rng.randint(1, 4) if not borrowed and rng.random() < 0.5 else 0
        line = {
            "flavor": "h100-80gb",
            "resource": "nvidia.com/gpu",
            "nominal": 4,
            "used": 4 - lent + borrowed,
            "borrowed": borrowed,
            "lent": lent,
        }
        summary = {
            "queue": f"test-{tenant.slug}",
            "lines": [line],
            "pending": rng.randint(0, 20),
            "admitted": rng.randint(0, 8),
            "active": True,
            "reason": "Can admit new workloads",
        }
        states.append(TenantSyncState(tenant=tenant, queue_status=summary))
    QuotaGrant.objects.bulk_create(grants, batch_size=5000)
    Membership.objects.bulk_create(members, batch_size=5000)
    TenantSyncState.objects.bulk_create(states, batch_size=5000)


def platform_admin():
    user, _ = get_user_model().objects.get_or_create(
        username="scale-admin", defaults={"is_staff": True}
    )
    group, _ = Group.objects.get_or_create(name="platform-admins")
    user.groups.add(group)
    return user


def seed_workloads(start: int, stop: int, teams: int) -> None:
    """Workloads start..stop-1: a fifth in team t00000, the rest round the first `teams` teams;
    four in five queued (their Kueue Workload pending), one in five running with a pod."""
    tenants = list(Tenant.objects.order_by("slug")[:teams])
    slug = ResourceClass.objects.filter(gpu_model="H100-80GB").values_list("slug", flat=True)[0]
    now = timezone.now()
    rows = []
    for i in range(start, stop):
        tenant = tenants[0] if i % BIG_SHARE == 0 else tenants[1 + i % (len(tenants) - 1)]
        running = i % 5 == 1
        rows.append(
            Workload(
                tenant=tenant,
                name=f"w{i:06d}",
                kind=Workload.Kind.JOB,
                image="registry.k8s.io/pause:3.10",
                resources={slug: 1},
                gpu_model="H100-80GB",
                priority_class="gpu-low",
                state=Workload.State.RUNNING if running else Workload.State.QUEUED,
                namespace=tenant.namespace,
                k8s_name=f"w{i:06d}",
                k8s_uid=f"uid-{i:06d}",
                cluster_created_at=now,
                started_at=now if running else None,
                created_at=now - timedelta(seconds=stop - i),
            )
        )
    Workload.objects.bulk_create(rows, batch_size=5000)


class World:
    """What the cluster holds for the workloads in PostgreSQL, as the API server lists it: per
    namespace the Jobs, pods, events and Kueue Workloads (plain dicts)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)

    @classmethod
    def of_workloads(cls) -> World:
        world = cls()
        rows = Workload.objects.values_list("pk", "namespace", "k8s_name", "k8s_uid", "state")
        for pk, ns, name, uid, state in rows.iterator(chunk_size=5000):
            world.add(pk, ns, name, uid, running=state == Workload.State.RUNNING)
        return world

    def add(self, pk: int, ns: str, name: str, uid: str, *, running: bool) -> None:
        stamp = f"2026-12-01T{pk // 3600 % 24:02d}:{pk // 60 % 60:02d}:{pk % 60:02d}Z"
        labels = {WORKLOAD_LABEL: str(pk)}
        meta = {"namespace": ns, "labels": labels, "creationTimestamp": stamp}
        self.objects[("Job", ns)][name] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {**meta, "name": name, "uid": uid},
            "spec": {"suspend": not running},
            "status": {"active": 1} if running else {},
        }
        admitted = [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
        ]
        self.objects[("KueueWorkload", ns)][f"job-{name}-abcde"] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"job-{name}-abcde",
                "namespace": ns,
                "labels": {KUEUE_JOB_UID_LABEL: uid},
                "creationTimestamp": stamp,
            },
            "spec": {"queueName": "default", "priority": pk % 3},
            "status": {"conditions": admitted if running else []},
        }
        self.objects[("Event", ns)][f"{name}.1"] = {
            "metadata": {"name": f"{name}.1", "namespace": ns},
            "involvedObject": {"kind": "Job", "name": name, "namespace": ns},
            "reason": "SuccessfulCreate" if running else "Suspended",
        }
        if running:
            pod = f"{name}-pod"
            self.objects[("Pod", ns)][pod] = {
                "metadata": {**meta, "name": pod, "uid": f"pod-{uid}"},
                "spec": {
                    "nodeName": f"scale-node-{pk % 200:03d}",
                    "containers": [
                        {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                    ],
                },
                "status": {"phase": "Running", "startTime": stamp},
            }

    def pods(self) -> list[dict]:
        return [
            p for (kind, _), objs in self.objects.items() if kind == "Pod" for p in objs.values()
        ]


class StandInGateway:
    """The calls the workload sync makes of `KubeGateway`, answered from a `World` (no cluster):
    what the portal itself spends on what it reads, with the API server's share left out."""

    def __init__(self, world: World) -> None:
        self.world = world

    def list(self, kind: str, namespace: str | None = None, **_) -> list[dict]:
        if namespace is None:
            return [
                o for (k, _), objs in self.world.objects.items() if k == kind for o in objs.values()
            ]
        return list(self.world.objects.get((kind, namespace), {}).values())

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self.world.objects.get((kind, namespace or ""), {}).get(name)
