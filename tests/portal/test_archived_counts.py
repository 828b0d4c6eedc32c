"""An archived team holds nothing and asks nothing (issue 49, 9): the console's list of teams
leaves it out unless asked for, and counts none of its GPUs or waiting asks, as the approval
queue leaves its asks out."""

import pytest
from django.test import Client

from tenants.models import CapacityRequest, Tenant
from tests.tenants.factories import CapacityRequestFactory, QuotaGrantFactory, TenantFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def archived(world) -> Tenant:
    gone = TenantFactory(slug="gone", name="Gone team", status=Tenant.Status.ARCHIVED)
    QuotaGrantFactory(tenant=gone, resource_class=world.rc, amount=4)  # left over
    CapacityRequestFactory(tenant=gone, state=CapacityRequest.State.SUBMITTED)
    CapacityRequestFactory(tenant=world.tenant, state=CapacityRequest.State.SUBMITTED)
    return gone


def _admin_client(world) -> Client:
    client = Client()
    client.force_login(world.admin)
    return client


def test_the_teams_list_leaves_archived_teams_out_and_says_so(world, archived):
    page = _admin_client(world).get("/console/tenants/").content.decode()
    assert "Gone team" not in page
    assert "1 archived team not listed" in page and 'href="?status=archived"' in page


def test_an_archived_team_listed_on_request_counts_nothing(world, archived):
    page = _admin_client(world).get("/console/tenants/", {"status": "archived"}).content.decode()
    row = page[page.index("Gone team") :].split("</tr>")[0]
    assert row.count('<td class="num">—</td>') == 2  # neither GPUs held nor waiting asks
    everything = _admin_client(world).get("/console/tenants/", {"status": "any"}).content.decode()
    assert "Gone team" in everything and "team-a" in everything
