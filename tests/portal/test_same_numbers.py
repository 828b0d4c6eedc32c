"""Same numbers everywhere: the team page, the home page, the API's `quota` (detail and list) and
the CLI's `gpu-portal quota` all show exactly `tenants.selectors.quota_lines(tenant)`, the one
read model of quota lines, for a tenant with grants in two classes, workloads holding units of
one of them, and a class still in use whose grant was revoked."""

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from django.test import Client
from django.urls import reverse

from catalog.models import ResourceClass
from cli.main import cli
from scheduler.workloads import services as workloads
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import Tenant
from tenants.models.priority_classes import DEFAULT_PRIORITY_CLASS
from tenants.selectors import quota_lines
from tenants.services import grants as grant_services
from tenants.services import tokens as token_services
from tests.portal.api.conftest import session
from tests.tenants.factories import PoolFactory, ResourceClassFactory

# (slug, display name, granted, in use, free): what every surface must show, row for row
Row = tuple[str, str, int, int, int]


@dataclass
class Numbers:
    world: object
    tenant: Tenant
    other: Tenant
    mig_1g: ResourceClass
    mig_3g: ResourceClass
    whole: ResourceClass


def _class(slug: str, kind: str, profile: str, resource_name: str, fraction: str, memory: int):
    rc = ResourceClassFactory(
        slug=slug,
        kind=kind,
        profile=profile,
        resource_name=resource_name,
        gpu_fraction=Decimal(fraction),
        memory_gb=memory,
    )
    PoolFactory(resource_class=rc, capacity=10)
    return rc


@pytest.fixture
def numbers(world, monkeypatch) -> Numbers:
    # No cluster here: what would be queued for it after commit (a transactional test commits)
    # goes nowhere.
    monkeypatch.setattr(workloads, "_enqueue_create", lambda workload_id: None)
    mig_3g = world.rc  # a100-80gb-mig-3g.40gb
    whole = _class("a100-80gb", "whole", "", "nvidia.com/gpu", "1", 80)
    mig_1g = _class(
        "a100-80gb-mig-1g.10gb", "mig", "1g.10gb", "nvidia.com/mig-1g.10gb", ".1429", 10
    )
    admin, member, tenant = world.admin, world.member, world.tenant
    grant_services.grant_quota(actor=admin, tenant=tenant, resource_class=mig_3g, amount=4)
    grant_services.grant_quota(actor=admin, tenant=tenant, resource_class=whole, amount=2)
    gone = grant_services.grant_quota(actor=admin, tenant=tenant, resource_class=mig_1g, amount=3)
    grant_services.grant_quota(
        actor=admin, tenant=world.other_tenant, resource_class=whole, amount=1
    )

    def submit(name, kind, resources, replicas=1):
        workloads.submit_workload(
            actor=member,
            tenant=tenant,
            spec=workload_spec(
                name=name,
                kind=kind,
                image="pytorch/pytorch:2.4-cuda12.4",
                resources=resources,
                priority=DEFAULT_PRIORITY_CLASS,
                replicas=replicas,
            ),
        )

    submit("train", "job", {mig_3g.slug: 1})
    submit("serve", "deployment", {mig_3g.slug: 1}, replicas=2)
    submit("small", "deployment", {mig_1g.slug: 1}, replicas=2)
    grant_services.revoke_grant(actor=admin, grant=gone, comment="in use, no longer granted")
    return Numbers(world, tenant, world.other_tenant, mig_1g, mig_3g, whole)


def expected(tenant: Tenant) -> list[Row]:
    return [
        (
            line.resource_class.slug,
            line.resource_class.display_name,
            line.granted,
            line.in_use,
            line.free,
        )
        for line in quota_lines(tenant)
    ]


def without_slug(rows: list[Row]) -> list[tuple]:
    return [row[1:] for row in rows]


def from_api(quota: list[dict]) -> list[tuple]:
    return [(q["resource_class"], q["granted"], q["in_use"], q["free"]) for q in quota]


def slug_and_numbers(rows: list[Row]) -> list[tuple]:
    return [(row[0], *row[2:]) for row in rows]


class Tables(HTMLParser):
    """The rows (cell texts) of every table, keyed by the table's class and by the section
    (`aria-labelledby`) around it."""

    def __init__(self):
        super().__init__()
        self.tables: dict[tuple[str, str], list[list[str]]] = {}
        self._section = ""
        self._key: tuple[str, str] | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._section = a.get("aria-labelledby") or ""
        elif tag == "table":
            self._key = (self._section, a.get("class") or "")
            self.tables[self._key] = []
        elif tag == "tr" and self._key:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._key:
            if self._row:  # header rows have no td
                self.tables[self._key].append(self._row)
            self._row = None
        elif tag == "table":
            self._key = None
        elif tag == "section":
            self._section = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def html_rows(body: str, section: str, table_class: str = "") -> list[tuple]:
    parser = Tables()
    parser.feed(body)
    rows = parser.tables[(section, table_class)]
    return [tuple(r[:4]) for r in rows]


def page_rows(tenant: Tenant) -> list[tuple]:
    """What a page's quota table shows of the read model (issue 49, 4): each number in the one
    format, "N × shape (= X of Y slices)"; in use is what runs, admitted work said apart."""
    return [
        (
            line.resource_class.display_name,
            line.granted_words,
            line.running_words
            + (
                f" + {line.waiting_for_nodes} admitted, not running yet"
                if line.waiting_for_nodes
                else ""
            ),
            line.free_words,
        )
        for line in quota_lines(tenant)
    ]


@pytest.mark.django_db
def test_the_scenario_is_the_one_we_mean(numbers):
    """Grants in two classes, units held in one of them, a class in use but no longer granted."""
    assert slug_and_numbers(expected(numbers.tenant)) == [
        ("a100-80gb", 2, 0, 2),
        ("a100-80gb-mig-1g.10gb", 0, 2, 0),
        ("a100-80gb-mig-3g.40gb", 4, 3, 1),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["member", "admin"])
def test_pages_and_api_show_the_read_model(numbers, who):
    user = getattr(numbers.world, who)
    want = expected(numbers.tenant)
    client = Client()
    client.force_login(user)

    team = client.get(reverse("team_detail", args=[numbers.tenant.slug]))
    lines = [row["line"] for row in team.context["lines"]]
    assert [(x.resource_class.slug, x.granted, x.in_use, x.free) for x in lines] == (
        slug_and_numbers(want)
    )
    assert html_rows(team.content.decode(), "quota-h", "quota") == page_rows(numbers.tenant)
    # the words carry the read model's numbers: granted, running (none yet), unused
    assert [
        tuple(int(cell.split(" ×")[0]) for cell in row[1:]) for row in page_rows(numbers.tenant)
    ] == [(granted, 0, free) for _, _, granted, _, free in want]

    home = client.get(reverse("home"))
    teams = {t["tenant"].slug: t["rows"] for t in home.context["teams"]}
    assert [(x.resource_class.slug, x.granted, x.in_use, x.free) for x in teams["team-a"]] == (
        slug_and_numbers(want)
    )
    home_body = home.content.decode()
    assert html_rows(home_body, "team-team-a") == page_rows(numbers.tenant)
    if who == "admin":  # the home page's one batch read keeps each tenant's lines apart
        assert html_rows(home_body, "team-team-b") == page_rows(numbers.other)
    else:
        assert "team-b" not in teams

    api = session(user)
    detail = api.get(f"/api/v1/tenants/{numbers.tenant.slug}/")
    assert detail.status_code == 200
    assert from_api(detail.data["quota"]) == slug_and_numbers(want)
    listed = {t["slug"]: t["quota"] for t in api.get("/api/v1/tenants/").data["results"]}
    assert from_api(listed["team-a"]) == slug_and_numbers(want)
    if who == "admin":
        assert from_api(listed["team-b"]) == slug_and_numbers(expected(numbers.other))


CLI_LINE = re.compile(r"^  (\S+)\s+granted\s+(\d+)\s+in use\s+(\d+)\s+free\s+(\d+)$")


def cli_text_rows(out: str, slug: str) -> list[tuple]:
    """The lines under `slug (...)` in `gpu-portal quota`'s text output."""
    rows, mine = [], False
    for line in out.splitlines():
        if not line.startswith(" "):
            mine = line.startswith(f"{slug} (")
            continue
        if mine and (m := CLI_LINE.match(line)):
            rows.append((m[1], int(m[2]), int(m[3]), int(m[4])))
    return rows


@pytest.mark.django_db(transaction=True)
def test_the_cli_shows_the_read_model_against_a_live_portal(numbers, live_server):
    _, raw = token_services.issue_token(
        actor=numbers.world.member, user=numbers.world.member, name="cli", scopes=["read"]
    )
    want = slug_and_numbers(expected(numbers.tenant))

    def run(*args):
        result = CliRunner().invoke(
            cli, list(args), env={"GPU_PORTAL_URL": live_server.url, "GPU_PORTAL_TOKEN": raw}
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    as_json = json.loads(run("--json", "quota", "--tenant", "team-a"))
    assert [from_api(t["quota"]) for t in as_json] == [want]
    assert cli_text_rows(run("quota", "--tenant", "team-a"), "team-a") == want
    assert cli_text_rows(run("quota"), "team-a") == want  # the list path: one batch read
