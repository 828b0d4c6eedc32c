"""A department's budget (issue 34's money, carried): its admins are warned once a month at 80 %
and 100 % of it and when the month-end forecast passes it, from its teams' statements summed;
its spend page is theirs and the platform team's alone."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core import mail
from django.test import Client

from metering import department_budgets
from metering.models import AllocationInterval, DepartmentBudgetAlert
from scheduler.cluster.models import Cluster
from tenants.models import AuditEvent, NotificationDelivery
from tenants.notifications import deliver_due
from tenants.services import departments as department_services
from tests.portal.api.conftest import session
from tests.tenants.factories import UserFactory

pytestmark = pytest.mark.django_db


def t(*args):
    return datetime(*args, tzinfo=UTC)


def used(tenant, rc, start, end, uid):
    """One unit of `rc` held from `start` to `end` (world.rc is priced 1.50 an hour)."""
    cluster, _ = Cluster.objects.get_or_create(name="local")
    AllocationInterval.objects.create(
        cluster=cluster,
        pod_uid=uid,
        namespace="ns",
        pod_name=uid,
        node_name="n",
        tenant=tenant,
        resource_class=rc,
        resource_name=rc.resource_name,
        units=1,
        started_at=start,
        last_seen_at=end,
        ended_at=end,
    )


@pytest.fixture
def research(world):
    """team-a and team-b in research, whose budget is 10 a month; its admin has an address."""
    dept = department_services.create_department(
        actor=world.admin, slug="research", name="Research", monthly_budget=Decimal("10")
    )
    head = UserFactory(username="head", email="head@example.com")
    department_services.set_department_admins(
        actor=world.admin, department=dept, usernames=[head.username]
    )
    for team in (world.tenant, world.other_tenant):
        department_services.assign_team(actor=world.admin, tenant=team, department=dept)
    dept.head = head
    return dept


def test_the_departments_admins_are_warned_once_at_80_and_100_percent_and_of_the_forecast(
    world, research, django_capture_on_commit_callbacks
):
    world.owner.email = "owner@example.com"  # a team's owner hears of their team's budget only
    world.owner.save()
    now = t(2026, 11, 20)
    used(world.tenant, world.rc, t(2026, 11, 2), t(2026, 11, 2, 4), "a")  # 6.00
    assert department_budgets.warn_department_budgets(now=now) == []  # 60 %, forecast 9.47

    used(world.other_tenant, world.rc, t(2026, 11, 3), t(2026, 11, 3, 2), "b")  # 9.00 in all
    with django_capture_on_commit_callbacks(execute=True):
        sent = department_budgets.warn_department_budgets(now=now)
        assert department_budgets.warn_department_budgets(now=now) == []  # once each
    assert sorted((a.kind, a.threshold, a.cost) for a in sent) == [
        ("forecast", 100, Decimal("9.00")),
        ("spend", 80, Decimal("9.00")),
    ]
    deliver_due()
    assert sorted(m.subject for m in mail.outbox) == [
        "[GPU Portal] research has used 90 % of its November 2026 budget",
        "[GPU Portal] research is on course to pass its November 2026 budget",
    ]
    assert all(m.to == ["head@example.com"] for m in mail.outbox)
    forecast_mail = next(m for m in mail.outbox if "on course" in m.subject)
    assert "ends at 14.21" in forecast_mail.body  # 9.00 over 19 of November's 30 days
    assert "/usage/departments/research/" in forecast_mail.body

    used(world.tenant, world.rc, t(2026, 11, 4), t(2026, 11, 4, 1), "c")  # 10.50: over
    with django_capture_on_commit_callbacks(execute=True):
        (over,) = department_budgets.warn_department_budgets(now=now)
    assert (over.kind, over.threshold, over.budget) == ("spend", 100, Decimal("10.00"))
    assert DepartmentBudgetAlert.objects.count() == 3
    assert AuditEvent.objects.filter(verb="department.budget_warned").count() == 3
    deliveries = NotificationDelivery.objects.filter(event__startswith="department.")
    assert {d.tenant_id for d in deliveries} == {None}  # no team's delivery log shows them
    assert {d.data["department"] for d in deliveries} == {"research"}

    # a new month starts afresh
    assert department_budgets.warn_department_budgets(now=t(2026, 12, 20)) == []


def test_a_department_without_a_budget_is_never_warned(world, research):
    research.monthly_budget = None
    research.save()
    used(world.tenant, world.rc, t(2026, 11, 2), t(2026, 11, 3), "a")  # 36.00
    assert department_budgets.warn_department_budgets(now=t(2026, 11, 20)) == []


def test_the_spend_page_is_for_the_departments_admins_and_the_platform_team(
    world, research, time_machine
):
    time_machine.move_to(t(2026, 11, 20))
    used(world.tenant, world.rc, t(2026, 11, 2), t(2026, 11, 2, 4), "a")  # 6.00
    used(world.other_tenant, world.rc, t(2026, 11, 3), t(2026, 11, 3, 1), "b")  # 1.50
    url = "/usage/departments/research/"
    for who in (research.head, world.admin):
        client = Client()
        client.force_login(who)
        page = client.get(url).content.decode()
        assert "7.50" in page and "75 %" in page  # of 10, all its teams together
        assert page.index("team-a") < page.index("team-b")  # the dearest first
    client = Client()
    client.force_login(world.member)  # sees the department, not what team-b costs
    assert client.get(url).status_code == 403
    client.force_login(UserFactory())  # nothing of it
    assert client.get(url).status_code == 404
    client.force_login(research.head)
    assert client.get(url + "?month=2026-13").status_code == 400


def test_the_spend_api_says_the_same_to_the_same_people(world, research, time_machine, settings):
    settings.BILLING_CURRENCY = "USD"  # the answer names it; not this machine's environment
    time_machine.move_to(t(2026, 11, 20))
    used(world.tenant, world.rc, t(2026, 11, 2), t(2026, 11, 2, 4), "a")  # 6.00
    used(world.other_tenant, world.rc, t(2026, 11, 3), t(2026, 11, 3, 1), "b")  # 1.50
    url = "/api/v1/usage/departments/research/"
    answer = session(research.head).get(url)
    assert answer.status_code == 200, answer.data
    assert answer.data == {
        "department": "research",
        "month": "2026-11",
        "currency": "USD",
        "cost": "7.50",
        "budget": "10.00",
        "percent": 75,
        "forecast": "11.84",  # 7.50 over 19 of November's 30 days
        "teams": [
            {"tenant": "team-a", "allocated_gpu_hours": "1.7144", "idle_cost": "0.00",
             "total": "6.00"},
            {"tenant": "team-b", "allocated_gpu_hours": "0.4286", "idle_cost": "0.00",
             "total": "1.50"},
        ],
    }  # fmt: skip
    # 4 h and 1 h of a 3g.40gb, 3 of 7 slices of a GPU
    assert session(world.admin).get(url).data == answer.data
    october = session(research.head).get(url + "?month=2026-10")
    assert (october.data["cost"], october.data["teams"][0]["total"]) == ("0.00", "0.00")
    assert session(research.head).get(url + "?month=2026-13").status_code == 400
    assert session(world.member).get(url).status_code == 403  # in research, not its admin
    assert session(UserFactory()).get(url).status_code == 404
