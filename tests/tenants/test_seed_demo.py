"""The demo world of `make run`: every request state, the seed article's quotas, workloads."""

import pytest
from django.core.management import call_command

from scheduler.workloads.models import Workload
from tenants.models import CapacityRequest, QuotaGrant, Tenant

pytestmark = pytest.mark.django_db


def test_seed_demo_builds_the_articles_world_once():
    call_command("seed_demo")
    team_a = Tenant.objects.get(slug="team-a")
    held = {
        g.resource_class.slug: g.amount
        for g in QuotaGrant.objects.effective().filter(tenant=team_a, request__isnull=True)
    }
    assert held == {"h200-141gb": 8, "h100-80gb-mig-3g.40gb": 4, "a100-80gb-mig-1g.10gb": 14}
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {
        "submitted",
        "provisioned",
        "rejected",
        "cancelled",
        "expired",
    }
    assert set(Workload.objects.values_list("name", flat=True)) == {
        "train-llm",
        "ranker",
        "hello-real-node",  # the real node's (B200s there)
        "echo",
    }
    ranker = Workload.objects.get(name="ranker")  # the demo shows autoscaling at work
    assert (ranker.replicas, ranker.max_replicas, ranker.target_gpu_util) == (2, 4, 60)
    call_command("seed_demo")  # a second run changes nothing
    assert Tenant.objects.count() == 4 and Workload.objects.count() == 4
