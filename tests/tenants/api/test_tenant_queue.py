"""A tenant's `queue` in the API: its Kueue queue as the portal last read it (what the console's
Queues page and the team page show), for `gpu-portal admin queues`; null until it is read."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler.cluster.models import TenantSyncState
from tenants.api.serializers import TenantSerializer
from tenants.models import Tenant
from tenants.services.tokens import issue_token
from tests.portal.api.conftest import bearer

pytestmark = pytest.mark.django_db

QUEUE = {
    "queue": "gp-team-a",
    "lines": [
        {"flavor": "a100-80gb", "resource": "gpu-portal.io/gpu-slices", "nominal": 6, "used": 9,
         "borrowed": 3, "lent": 0}
    ],
    "pending": 2,
    "admitted": 1,
    "active": True,
    "reason": "Can admit new workloads",
}  # fmt: skip


def token(user) -> str:
    return issue_token(actor=user, user=user, name="t", scopes=["read"])[1]


def test_a_platform_admin_reads_every_teams_queue_and_null_before_it_is_read(world):
    TenantSyncState.objects.create(tenant=world.tenant, queue_status=QUEUE)
    rows = bearer(token(world.admin)).get("/api/v1/tenants/").data["results"]
    by_slug = {t["slug"]: t["queue"] for t in rows}
    assert by_slug == {"team-a": QUEUE, "team-b": None}
    TenantSyncState.objects.create(tenant=world.other_tenant)  # synced, queue not read yet
    one = bearer(token(world.admin)).get("/api/v1/tenants/team-b/").data
    assert one["queue"] is None and one["reconcile_status"] == "pending"


def test_a_member_reads_the_queue_of_their_team_only(world):
    TenantSyncState.objects.create(tenant=world.tenant, queue_status=QUEUE)
    TenantSyncState.objects.create(tenant=world.other_tenant, queue_status=QUEUE)
    client = bearer(token(world.viewer))
    assert client.get("/api/v1/tenants/team-a/").data["queue"] == QUEUE
    assert client.get("/api/v1/tenants/team-b/").status_code == 404
    assert [t["slug"] for t in client.get("/api/v1/tenants/").data["results"]] == ["team-a"]


def test_the_queue_asks_no_query_of_its_own(world):
    """Lists read the sync states with the tenants (select_related); a tenant read alone (the
    answer to a create or an edit) asks once, for both `reconcile_status` and `queue`, even
    when it has no sync state (which Django does not remember)."""
    tenant = Tenant.objects.get(slug="team-b")
    serializer = TenantSerializer()
    with CaptureQueriesContext(connection) as queries:
        assert serializer.get_reconcile_status(tenant) == "pending"
        assert serializer.get_queue(tenant) is None
    assert len(queries.captured_queries) == 1
