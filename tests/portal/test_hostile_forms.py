"""Every HTML form the portal serves, sent back by the person it is served to with one field at a
time set to what people (and scripts) really type: numbers no column holds, negatives, a NUL,
emoji, 5,000 characters. No answer is a 5xx, and a refused post writes nothing (issue 35, 1)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.messages import constants, get_messages
from django.db import connection, transaction
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from scheduler.health.models import HealthRule
from scheduler.mig import proposals
from scheduler.mig.models import Plan
from tenants.models import CapacityRequest, Membership, QuotaGrant
from tenants.services import channels as channel_services
from tenants.services import requests as request_services
from tenants.services import tokens as token_services
from tenants.views import MEMBER_FORM_SESSION_KEY
from tests.scheduler.factories import NodeFactory, WorkloadFactory
from tests.tenants.factories import PlatformAdminFactory

pytestmark = pytest.mark.django_db

USERNAMES = {"admin": "platform"}  # the world's platform admin
HOSTILE = ["1e308", "10000000000", "-1", "a\x00b", "🚀🔥", "x" * 5000]


@dataclass
class Form:
    page: str
    method: str
    action: str
    hx_get: str = ""
    fields: list[tuple[str, str]] = field(default_factory=list)  # as a browser sends them
    unsent: set[str] = field(default_factory=set)  # unticked boxes, empty multiple selects


class Forms(HTMLParser):
    """The forms of a page and what a browser would send for each, untouched."""

    def __init__(self, page: str):
        super().__init__()
        self.page, self.forms = page, []
        self.form: Form | None = None
        self.select: tuple[str, bool] | None = None  # name, multiple
        self.options: list[tuple[str, bool]] = []
        self.textarea: str | None = None
        self.text = ""

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.form = Form(
                page=self.page,
                method=(a.get("method") or "get").lower(),
                action=a.get("action") or self.page,
                hx_get=a.get("hx-get", ""),
            )
            self.forms.append(self.form)
        if self.form is None or "name" not in a and tag != "option":
            return
        if tag == "input" and a.get("type") not in ("checkbox", "radio", "submit", "button"):
            self.form.fields.append((a["name"], a.get("value", "")))
        elif tag == "input" and a.get("type") in ("checkbox", "radio"):
            if "checked" in a:
                self.form.fields.append((a["name"], a.get("value", "on")))
            else:
                self.form.unsent.add(a["name"])
        elif tag == "button" and a.get("name"):
            # the first named button is the one pressed (approve, not reject)
            if a["name"] not in {name for name, _ in self.form.fields}:
                self.form.fields.append((a["name"], a.get("value", "")))
        elif tag == "select":
            self.select, self.options = (a["name"], "multiple" in a), []
        elif tag == "option" and self.select is not None:
            self.options.append((a.get("value", ""), "selected" in a))
        elif tag == "textarea":
            self.textarea, self.text = a["name"], ""

    def handle_data(self, data):
        if self.textarea is not None:
            self.text += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.form = None
        elif tag == "select" and self.select is not None and self.form is not None:
            name, multiple = self.select
            chosen = [v for v, selected in self.options if selected]
            if not chosen and not multiple and self.options:
                chosen = [self.options[0][0]]
            self.form.fields.extend((name, v) for v in chosen)
            if not chosen:
                self.form.unsent.add(name)
            self.select = None
        elif tag == "textarea" and self.textarea is not None and self.form is not None:
            self.form.fields.append((self.textarea, self.text.removeprefix("\n")))
            self.textarea = None


def forms_of(client: Client, page: str) -> list[Form]:
    response = client.get(page)
    assert response.status_code == 200, page
    parser = Forms(page)
    parser.feed(response.content.decode())
    return [f for f in parser.forms if f.action != "/accounts/logout/"]


def row_counts() -> dict[str, int]:
    """Rows of every table but sessions (signing in writes one), in one query."""
    tables = connection.introspection.django_table_names(only_existing=True)
    sql = " UNION ALL ".join(
        f"SELECT '{t}', count(*) FROM {connection.ops.quote_name(t)}"
        for t in tables
        if t != "django_session"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return dict(cursor.fetchall())


def refused(response) -> bool:
    """A post the portal turned down: a 4xx, the form again (200) or a redirect with an error."""
    if response.status_code >= 400 or response.status_code == 200:
        return True
    # this request's messages only: a refusal before it may still wait, unread, in the session
    added = getattr(get_messages(response.wsgi_request), "_queued_messages", [])
    if any(m.level >= constants.ERROR for m in added):
        return True
    # "add member" carries a refused form over its redirect, to show it at the form
    return MEMBER_FORM_SESSION_KEY in response.wsgi_request.session


def send(client: Client, form: Form, data: dict[str, list[str]], url: str | None = None):
    target = url or form.action
    if form.method == "post" and url is None:
        return client.post(target, data)
    return client.get(target, data)


def hostile_posts(form: Form):
    # the CSRF token is no user's value (and the test client does not check it)
    names = [n for n, _ in form.fields] + sorted(form.unsent)
    names = [n for n in dict.fromkeys(names) if n != "csrfmiddlewaretoken"]
    base: dict[str, list[str]] = {}
    for name, value in form.fields:
        base.setdefault(name, []).append(value)
    for name in names:
        for value in HOSTILE:
            yield name, value, {**base, name: [value]}


def admin_add_pages(user) -> list[str]:
    """The Django admin's add form of every model a platform admin may add."""
    request = RequestFactory().get("/admin/")
    request.user = user
    return [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
        for model, model_admin in admin.site._registry.items()
        if model_admin.has_add_permission(request)
    ]


@pytest.fixture
def served(world):
    """Something for every form to act on: a grant to extend, an ask waiting, a channel, a
    token, a workload, a GPU node and a health rule."""
    now = timezone.now()
    QuotaGrant.objects.create(
        tenant=world.tenant,
        resource_class=world.rc,
        amount=2,
        starts_at=now - timedelta(days=1),
        ends_at=now + timedelta(days=3),
    )
    waiting = request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 3},
        ends_at=now + timedelta(days=30),
        justification="train",
    )
    channel_services.create_channel(
        actor=world.owner,
        tenant=world.tenant,
        kind="email",
        name="ops",
        target="ops@example.com",
    )
    channel_services.create_channel(
        actor=world.admin, tenant=None, kind="email", name="platform", target="p@example.com"
    )
    token, _ = token_services.issue_token(
        actor=world.member, user=world.member, name="ci", scopes=["read"]
    )
    workload = WorkloadFactory(tenant=world.tenant, submitted_by=world.member)
    NodeFactory(name="gpu-1", gpu_model="A100-80GB", gpu_count=8)
    rule = HealthRule.objects.first()
    grant = QuotaGrant.objects.get(tenant=world.tenant, amount=2)
    plan = proposals.create_plan(actor=world.admin, method="greedy")
    viewer = Membership.objects.get(tenant=world.tenant, user=world.viewer)
    root = PlatformAdminFactory(username="root", is_superuser=True)
    return {
        "member": [
            "/teams/team-a/",
            "/teams/team-a/ask/",
            "/teams/team-a/workloads/new/",
            "/teams/team-a/workloads/",
            "/teams/team-a/requests/",
            f"/requests/{waiting.pk}/cancel/",
            f"/workloads/{workload.pk}/cancel/",
            f"/grants/{grant.pk}/extend/",
            "/tokens/",
            f"/tokens/{token.pk}/revoke/",
        ],
        "owner": [
            "/teams/team-a/",
            f"/teams/team-a/members/{viewer.pk}/remove/",
            "/usage/teams/team-a/",
            "/teams/team-a/notifications/",
            "/tokens/",
        ],
        "admin": [
            "/console/",
            f"/requests/{waiting.pk}/",
            "/console/plans/",
            f"/console/plans/{plan.pk}/",
            "/console/health/",
            "/console/audit/",
            "/console/tenants/",
            "/console/sso/",
            "/console/gpu-health/",
            "/console/clusters/",
            "/console/clusters/local/",
            *([f"/console/gpu-health/rules/{rule.pk}/"] if rule else []),
            "/platform/notifications/",
            "/usage/platform/",
        ],
        # the Django admin's forms, as a superuser (whom it gives every model permission)
        "root": admin_add_pages(root),
    }


def try_one(client: Client, form: Form, data: dict, url: str | None) -> str:
    """What went wrong sending `data` (nothing: ""), undone afterwards either way, so that
    each post starts from the same rows."""
    with transaction.atomic():
        before = row_counts()
        try:
            response = send(client, form, data, url)
        except Exception as exc:  # noqa: BLE001 - every failure is listed, not the first
            transaction.set_rollback(True)
            return f"raised {exc.__class__.__name__}: {exc}"[:300]
        problem = ""
        if response.status_code >= 500:
            problem = str(response.status_code)
        elif form.method == "post" and url is None and refused(response):
            after = row_counts()
            changed = {t: (before.get(t), n) for t, n in after.items() if before.get(t) != n}
            if changed:
                problem = f"refused but wrote {changed}"
        transaction.set_rollback(True)
        return problem


def test_no_form_answers_5xx_or_half_writes_to_hostile_values(world, served):
    failures: list[str] = []
    sent = 0
    for who, pages in served.items():
        client = Client()
        client.force_login(User.objects.get(username=USERNAMES.get(who, who)))
        for page in pages:
            for form in forms_of(client, page):
                for name, value, data in hostile_posts(form):
                    # the ask form's live preview (hx-get) is sent what the form holds, too
                    for url in [None, form.hx_get] if form.hx_get else [None]:
                        sent += 1
                        if problem := try_one(client, form, data, url):
                            target = url or form.action
                            failures.append(f"{who} {target} {name}={value[:12]!r}: {problem}")
    assert sent > 300  # every form was found and sent
    assert not failures, "\n".join(failures)


def test_no_portal_form_lets_the_browser_cut_what_was_typed(world, served):
    """A `maxlength` makes a browser drop what is typed or pasted beyond it without a word; the
    portal's forms refuse too long a value instead, saying by how much (issue 35, 12)."""
    for who, pages in served.items():
        if who == "root":
            continue  # the Django admin's own forms
        client = Client()
        client.force_login(User.objects.get(username=USERNAMES.get(who, who)))
        for page in pages:
            assert "maxlength" not in client.get(page).content.decode(), (who, page)


def test_the_login_form_answers_hostile_values_without_a_5xx(world):
    client = Client()
    (form,) = forms_of(client, "/accounts/login/")
    for name, value, data in hostile_posts(form):
        response = client.post(form.action, data)
        assert response.status_code < 500, (name, value)


# --- what the sweep above found, each named: a 4xx or the form again, saying what to change ---


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_decision_comment_with_a_nul_is_refused_at_the_comment(world, served):
    waiting = CapacityRequest.objects.get(state=CapacityRequest.State.SUBMITTED)
    client = admin_client(world.admin)
    one = client.post(
        "/console/decide/", {"one": f"approve:{waiting.pk}", f"note-{waiting.pk}": "ok\x00"}
    )
    several = client.post(
        "/console/decide/", {"action": "reject", "request": [waiting.pk], "comment": "no\x00"}
    )
    for response in (one, several):
        assert response.status_code == 400
        assert "comment has a NUL character" in response.content.decode()
    waiting.refresh_from_db()
    assert waiting.state == CapacityRequest.State.SUBMITTED


def test_a_plan_for_an_unknown_node_or_a_weight_that_is_no_number_is_refused(world, served):
    client = admin_client(world.admin)
    for data, says in [
        ({"sharing": "🚀"}, "sharing must be one of"),  # not quietly time-slicing
        ({"method": "x" * 5000}, "method must be one of"),
        ({"node": "gpu-\x00"}, "no GPU node named 'gpu-\\x00' in the inventory"),
        ({"node": "gpu-typo"}, "no GPU node named 'gpu-typo' in the inventory"),
        ({"large_shape_weight": "🚀"}, "the large-shape weight must be a number ≥ 0"),
        ({"large_shape_weight": "1e309"}, "the large-shape weight must be a finite number ≥ 0"),
    ]:
        response = client.post("/console/plans/new/", data, follow=True)
        assert says in html.unescape(response.content.decode()), data
    assert Plan.objects.count() == 1  # the fixture's only


def test_searching_teams_or_the_queue_for_a_nul_finds_nothing_and_fails_nothing(world, served):
    client = admin_client(world.admin)
    teams = client.get("/console/tenants/", {"q": "team\x00"})
    assert teams.status_code == 200 and "team-a" not in teams.content.decode()
    queue = client.get("/console/", {"tenant": "team-a\x00", "class": "\x00"})
    assert queue.status_code == 200  # an unknown filter is ignored, as any unknown value


def test_the_admins_token_form_given_a_user_that_is_no_id_says_so(world, served):
    root = User.objects.get(username="root")
    response = admin_client(root).post(
        "/admin/tenants/apitoken/add/",
        {"user": "abc", "name": "ci", "scopes": ["read"], "expires_in_days": "30"},
    )
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
