"""Nothing long left uncapped or ungrouped (issue 35, 12): the team page shows the first few
waiting asks and workloads with a link to all; the approval queue groups identical asks into
one row and one decision; a platform admin signs in to the queue when asks wait; GPU health
says nothing of healthy nodes while its checks are off."""

import pytest
from django.urls import reverse

from scheduler.cluster.models import TenantSyncState
from scheduler.health.models import NodeHealth
from scheduler.workloads.models import Workload
from tenants.models import CapacityRequest
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import CapacityRequestFactory, CapacityRequestItemFactory

pytestmark = pytest.mark.django_db


def ask(world, *, why="same thing", amount=1, tenant=None):
    request = CapacityRequestFactory(
        tenant=tenant or world.tenant, requester=world.member, justification=why, ends_at=None
    )
    CapacityRequestItemFactory(request=request, resource_class=world.rc, amount=amount)
    return request


def test_the_team_page_caps_waiting_asks_and_workloads_with_a_link_to_all(client, world):
    asks = [ask(world, why=f"ask {n}") for n in range(8)]
    TenantSyncState.objects.create(
        tenant=world.tenant,
        queue_status={"queue": "q", "lines": [], "pending": 7, "admitted": 0, "active": True},
    )
    for n in range(7):
        WorkloadFactory(tenant=world.tenant, name=f"w-{n}", state=Workload.State.QUEUED)
    client.force_login(world.member)
    body = client.get(reverse("team_detail", args=["team-a"])).content.decode()
    shown = [a.pk for a in asks if f'href="/requests/{a.pk}/"' in body]
    assert shown == [a.pk for a in asks[:5]]  # the oldest five
    assert "Show all 8 waiting asks" in body
    assert "?state=submitted" in body
    queue = body[body.index('id="queue-h"') :]
    queue = queue[: queue.index("</section>")]
    assert sum(f">w-{n}</a>" in queue for n in range(7)) == 5
    assert "Show all queued workloads</a> (7 wait in all)" in body


def test_a_gang_kueue_admitted_but_not_all_placed_waits_on_the_team_page(client, world):
    """Kueue counts it admitted; the team sees it waiting, with why, and how many of the
    admitted are not all placed."""
    TenantSyncState.objects.create(
        tenant=world.tenant,
        queue_status={"queue": "q", "lines": [], "pending": 0, "admitted": 2, "active": True},
    )
    WorkloadFactory(tenant=world.tenant, name="whole", state=Workload.State.RUNNING)
    WorkloadFactory(
        tenant=world.tenant, name="half", state=Workload.State.PENDING, reason="GangIncomplete",
        message="1 of 2 pods running; the job waits until every pod is placed",
    )  # fmt: skip
    client.force_login(world.member)
    body = client.get(reverse("team_detail", args=["team-a"])).content.decode()
    queue = body[body.index('id="queue-h"') :]
    queue = queue[: queue.index("</section>")]
    assert "2 admitted (1 of them not all placed yet" in queue
    assert ">half</a>" in queue and "1 of 2 pods running" in queue
    assert ">whole</a>" not in queue


def test_a_few_waiting_asks_need_no_link(client, world):
    ask(world)
    client.force_login(world.member)
    body = client.get(reverse("team_detail", args=["team-a"])).content.decode()
    assert "Show all" not in body and "Waiting for the platform team <small>1</small>" in body


def test_the_queue_groups_identical_asks_into_one_decision(client, world):
    same = [ask(world) for _ in range(4)]
    other = ask(world, why="something else")
    client.force_login(world.admin)
    body = client.get(reverse("console:queue")).content.decode()
    assert body.count('name="request"') == 1  # the odd one out
    assert body.count('name="group"') == 1
    assert "× 4 identical" in body and "5 waiting" in body
    ids = ",".join(str(a.pk) for a in same)
    response = client.post(reverse("console:decide"), {"one": f"reject:{ids}"})
    assert response.status_code == 400  # a reject needs a reason: nothing decided
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {"submitted"}
    client.post(reverse("console:decide"), {"one": f"approve:{ids}", f"note-{same[0].pk}": "ok"})
    states = dict(CapacityRequest.objects.values_list("pk", "state"))
    assert [states[a.pk] for a in same] == ["approved"] * 4
    assert states[other.pk] == "submitted"


def test_a_grouped_rows_checkbox_selects_all_its_asks(client, world):
    same = [ask(world) for _ in range(3)]
    client.force_login(world.admin)
    ids = ",".join(str(a.pk) for a in same)
    client.post(
        reverse("console:decide"), {"group": ids, "action": "reject", "comment": "pool is full"}
    )
    assert set(CapacityRequest.objects.values_list("state", flat=True)) == {"rejected"}


def test_a_platform_admin_lands_on_the_queue_when_asks_wait(client, world):
    world.admin.set_password("pw")
    world.admin.save()
    signed_in = client.post(reverse("login"), {"username": "platform", "password": "pw"})
    assert client.get(signed_in.url).url == reverse("home")  # nothing waits
    ask(world)
    assert client.get(reverse("landing")).url == reverse("console:queue")
    client.force_login(world.member)
    assert client.get(reverse("landing")).url == reverse("home")  # not an admin


def test_gpu_health_says_nothing_of_healthy_nodes_while_checks_are_off(client, world, settings):
    from scheduler.cluster.models import Cluster

    settings.PROMETHEUS_URL = ""
    NodeHealth.objects.create(
        cluster=Cluster.objects.create(name="local"),
        node_name="n1",
        state=NodeHealth.State.HEALTHY,
    )
    client.force_login(world.admin)
    page = client.get(reverse("console:gpu_health")).content.decode()
    assert "checks are off" in page
    assert "Every node the checks read is healthy" not in page
    assert "node healthy" not in page
