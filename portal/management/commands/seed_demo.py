"""The seed article's world, for `make run` and for trying the portal. Idempotent: a second run
changes nothing that the first made."""

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from catalog import services as catalog
from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes
from scheduler.workloads.services import submit_workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import CapacityRequest, Membership, Tenant
from tenants.services import grants as grant_services
from tenants.services import policy_rules
from tenants.services import requests as request_services
from tenants.services import tenants as tenant_services

DEMO_PASSWORD = "gpu-portal-demo"  # noqa: S105 - demo data for a local machine only

# The local cluster's seed fleet (localcluster/fleet.yaml); the inventory sync keeps it true.
SEED_POOLS = {
    "a100-80gb": 2,
    "a100-80gb-mig-3g.40gb": 2,
    "a100-80gb-mig-1g.10gb": 7,
    "h100-80gb-mig-3g.40gb": 16,
    "h200-141gb": 8,
    "l40s-48gb-shared": 16,
    "rtx4090-24gb": 4,
    # the local cluster's real node, where the demo's work really runs (`make run` has it play
    # two B200s: localcluster/realnode.py); no KWOK node is a B200
    "b200-180gb": 2,
}
# Quota may be promised beyond the devices, betting that not every team runs flat out at once.
SEED_OVERCOMMIT = {"a100-80gb-mig-1g.10gb": Decimal("2.0")}
# Kueue cohort: a team may borrow this many idle units of others' grants (reclaimed on demand).
SEED_BORROWING = {"h100-80gb-mig-3g.40gb": 4, "l40s-48gb-shared": 4}
SEED_POLICY = {  # class: (max amount, max hours) approved without a human
    "a100-80gb-mig-1g.10gb": (2, 72),
    "l40s-48gb-shared": (4, 168),
    "h100-80gb-mig-3g.40gb": (1, 24),
}
USERS = [  # username, first name, tenant, role
    ("alice", "Alice", "team-a", "owner"),
    ("bob", "Bob", "team-a", "member"),
    ("carol", "Carol", "team-b", "owner"),
    ("dave", "Dave", "team-b", "viewer"),
    ("ines", "Ines", "inference", "owner"),
    ("tom", "Tom", "training", "owner"),
]
TENANTS = [
    ("team-a", "Team A (research)", "CC-1001", Decimal("40")),
    ("team-b", "Team B (product)", "CC-1002", Decimal("12")),
    ("inference", "Inference platform", "CC-2001", Decimal("8")),
    ("training", "Training infrastructure", "CC-2002", Decimal("16")),
]
GRANTS = [  # tenant, class, amount: the seed article's quotas
    ("team-a", "h200-141gb", 8),
    ("team-a", "h100-80gb-mig-3g.40gb", 4),
    ("team-a", "a100-80gb-mig-1g.10gb", 14),
    ("team-b", "rtx4090-24gb", 4),
    ("team-b", "h100-80gb-mig-3g.40gb", 2),
    ("inference", "l40s-48gb-shared", 8),
    ("training", "a100-80gb", 2),
    ("training", "b200-180gb", 2),
]


class Command(BaseCommand):
    help = "Create demo tenants, users, pools, policy, grants and requests in every state."

    def handle(self, *args, **options):
        if Tenant.objects.filter(slug="team-a").exists():
            self.stdout.write("Demo data already present.")
            return
        with transaction.atomic():
            self._seed()
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo data created. Sign in as 'admin' (platform admin), 'alice' (team-a owner), "
                f"'bob' (team-a member) or 'carol' (team-b owner); password '{DEMO_PASSWORD}'."
            )
        )

    def _seed(self):
        User = get_user_model()
        admins, _ = Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)
        admin = User.objects.create_user(
            "admin",
            "admin@example.com",
            DEMO_PASSWORD,
            is_staff=True,
            is_superuser=True,
            first_name="Platform admin",
        )
        admin.groups.add(admins)
        ensure_resource_classes(
            ["A100-80GB", "H100-80GB", "H200-141GB", "L40S-48GB", "RTX4090-24GB", "B200-180GB"]
        )
        classes = {rc.slug: rc for rc in ResourceClass.objects.all()}
        for slug, capacity in SEED_POOLS.items():
            catalog.set_pool(
                actor=admin,
                resource_class=classes[slug],
                capacity=capacity,
                overcommit_ratio=SEED_OVERCOMMIT.get(slug),
                borrowing_limit=SEED_BORROWING.get(slug),
            )
        for slug, (amount, hours) in SEED_POLICY.items():
            policy_rules.set_auto_approval_rule(
                actor=admin,
                resource_class=classes[slug],
                max_amount=amount,
                max_duration_hours=hours,
            )
        tenants = {}
        for slug, name, cc, ceiling in TENANTS:
            tenants[slug] = tenant_services.create_tenant(
                actor=admin,
                slug=slug,
                name=name,
                cost_centre=cc,
                gpu_ceiling=ceiling,
                monthly_budget=Decimal("20000"),
            )
        users = {}
        for username, first, tenant, role in USERS:
            users[username] = User.objects.create_user(
                username, f"{username}@example.com", DEMO_PASSWORD, first_name=first
            )
            Membership.objects.create(tenant=tenants[tenant], user=users[username], role=role)
        for tenant, slug, amount in GRANTS:
            grant_services.grant_quota(
                actor=admin,
                tenant=tenants[tenant],
                resource_class=classes[slug],
                amount=amount,
                comment="seed quota",
            )
        self._requests(admin, users, tenants, classes)
        self._workloads(users, tenants)
        self._real_work(users, tenants)

    def _requests(self, admin, users, tenants, classes):
        now = timezone.now()
        ask = request_services.submit_capacity_request
        # Waiting for a platform admin (outside the auto-approval envelope).
        ask(
            actor=users["tom"],
            tenant=tenants["training"],
            items={"h100-80gb-mig-3g.40gb": 4},
            ends_at=now + timedelta(days=30),
            justification="Fine-tune the 70B model for Q1",
        )
        # Approved at once by the policy, then provisioned.
        quick = ask(
            actor=users["bob"],
            tenant=tenants["team-a"],
            items={"l40s-48gb-shared": 2},
            ends_at=now + timedelta(hours=12),
            justification="Notebook experiments",
        )
        request_services.mark_request_provisioned(request=quick)
        # Rejected, cancelled and expired ones, for the timeline and the filters.
        rejected = ask(
            actor=users["carol"],
            tenant=tenants["team-b"],
            items={"h100-80gb-mig-3g.40gb": 4},
            ends_at=now + timedelta(days=90),
            justification="Benchmark MIG slices against RTX 4090",
        )
        request_services.reject_capacity_request(
            actor=admin, request=rejected, comment="Use the RTX 4090s you hold for this benchmark"
        )
        cancelled = ask(
            actor=users["ines"],
            tenant=tenants["inference"],
            items={"l40s-48gb-shared": 4},
            ends_at=now + timedelta(days=14),
            justification="Load test of the new ranking model",
        )
        request_services.cancel_capacity_request(
            actor=users["ines"], request=cancelled, comment="Postponed"
        )
        expired = ask(
            actor=users["ines"],
            tenant=tenants["inference"],
            items={"l40s-48gb-shared": 2},
            ends_at=now + timedelta(hours=2),
            justification="Demo for the board",
        )
        grant_services.expire_grants(now=now + timedelta(hours=3))
        expired.refresh_from_db()
        assert expired.state == CapacityRequest.State.EXPIRED

    def _real_work(self, users, tenants):
        """On the real node (B200s there): a job whose command runs, logs and finishes, and a
        service that answers requests, both in the image the local cluster builds."""
        image = "localhost/gpu-portal/demo-python:local"
        submit_workload(
            actor=users["tom"],
            tenant=tenants["training"],
            spec=workload_spec(
                name="hello-real-node",
                kind="job",
                image=image,
                command=["python", "/opt/demo/train.py"],
                env={"EPOCHS": "120", "EPOCH_SECONDS": "1"},
                resources={"b200-180gb": 1},
                priority="gpu-low",
            ),
        )
        submit_workload(
            actor=users["tom"],
            tenant=tenants["training"],
            spec=workload_spec(
                name="echo",
                kind="deployment",
                image=image,
                command=["python", "/opt/demo/serve.py"],
                ports=[8080],
                resources={"b200-180gb": 1},
                priority="gpu-high",
            ),
        )

    def _workloads(self, users, tenants):
        """A training job and an autoscaled inference service, created on the cluster by the
        worker once `make run` starts it, so the workload pages, the capacity map and usage have
        data."""
        submit_workload(
            actor=users["bob"],
            tenant=tenants["team-a"],
            spec=workload_spec(
                name="train-llm",
                kind="job",
                image="pytorch/pytorch:2.4-cuda12.4",
                command=["python", "train.py", "--epochs", "3"],
                resources={"h100-80gb-mig-3g.40gb": 1},
                priority="gpu-low",
            ),
        )
        submit_workload(
            actor=users["ines"],
            tenant=tenants["inference"],
            spec=workload_spec(
                name="ranker",
                kind="deployment",
                image="nvcr.io/nvidia/tritonserver:24.08-py3",
                resources={"l40s-48gb-shared": 1},
                priority="gpu-high",
                # scaled on its GPU utilisation, which the demo's metrics serve
                # (python -m demo, started by make run)
                autoscaling={"min_replicas": 2, "max_replicas": 4, "target_gpu_util": 60},
            ),
        )
