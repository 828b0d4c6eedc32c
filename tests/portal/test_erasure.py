"""Erasing a departed person (real PostgreSQL): afterwards no text or JSON field of their rows
holds their username, e-mail or names, and no field anywhere their e-mail (the walk is generic: a
new model that keeps personal data fails it); what others wrote stays theirs, so a name that is
also a word is never rewritten in another team's data; the audit chain still verifies, and bad
input is a clear refusal."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import CommandError, call_command
from django.db import models
from django.db.models.functions import Cast
from django.utils import timezone

from core.errors import Forbidden, InvalidInput, NotFound
from portal.erasure import erase_person, text_fields
from portal.models import OIDCIdentity
from scheduler.workloads.models import WorkloadEvent
from tenants import audit_chain
from tenants.models import ApiToken, Membership, NotificationChannel, NotificationDelivery
from tenants.services import tokens as token_services
from tenants.services.requests import submit_capacity_request
from tests.scheduler.factories import WorkloadFactory
from tests.tenants.factories import (
    MembershipFactory,
    PlatformAdminFactory,
    PoolFactory,
    TenantFactory,
    UserFactory,
)

USERNAME, EMAIL = "zquinlan", "zelda.quinlan@example.org"
FIRST, LAST = "Zeldaria", "Quinlanova"
TRACES = [USERNAME, EMAIL, FIRST, LAST]
# What others wrote about the person, which an erasure leaves (only the person's own rows and
# what they wrote are rewritten; their e-mail, no ordinary word, goes from everywhere): the
# platform's name for a team, the mail and the event text the portal sent.
OTHERS_WORDS = [
    "scheduler.WorkloadEvent.message: zquinlan",
    "tenants.NotificationDelivery.subject: Zeldaria",
    "tenants.NotificationDelivery.text: Zeldaria",
    "tenants.NotificationDelivery.text: zquinlan",
    "tenants.Tenant.name: Quinlanova",
    "tenants.Tenant.name: Zeldaria",
]


def traces_left() -> list[str]:
    """Every text and JSON field of every table that still holds one of the person's traces."""
    found = []
    for model in apps.get_models():
        for f in text_fields(model):
            rows = model._base_manager.all()
            lookup = f.name
            if isinstance(f, models.JSONField):
                rows, lookup = rows.annotate(t=Cast(f.name, models.TextField())), "t"
            for trace in TRACES:
                if rows.filter(**{f"{lookup}__icontains": trace}).exists():
                    found.append(f"{model._meta.label}.{f.name}: {trace}")
    return found


@pytest.fixture
def person(db):
    """A person who has left traces everywhere a person does."""
    admin = PlatformAdminFactory(username="root-admin")
    user = UserFactory(username=USERNAME, email=EMAIL, first_name=FIRST, last_name=LAST)
    tenant = TenantFactory(name=f"Team of {FIRST} {LAST}")
    MembershipFactory(tenant=tenant, user=user, role=Membership.Role.OWNER)
    pool = PoolFactory()
    submit_capacity_request(
        actor=user,
        tenant=tenant,
        items={pool.resource_class.slug: 1},
        ends_at=timezone.now() + timedelta(days=7),
        justification=f"{FIRST} needs it; mail {EMAIL}",
    )
    token_services.issue_token(actor=user, user=user, name=f"{USERNAME}-laptop", scopes=["read"])
    OIDCIdentity.objects.create(issuer="https://sso.example.org", subject="sub-7781", user=user)
    NotificationChannel.objects.create(tenant=tenant, kind="email", name="mail", target=EMAIL)
    NotificationDelivery.objects.create(
        tenant=tenant, event="e", recipients=[EMAIL], subject=f"Hi {FIRST}", text="t"
    )
    workload = WorkloadFactory(tenant=tenant, submitted_by=user, labels={"owner": USERNAME})
    WorkloadEvent.objects.create(workload=workload, reason="r", message=f"stopped by {USERNAME}")
    LogEntry.objects.log_actions(user.pk, [user], ADDITION, change_message=f"{FIRST} added")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["note"] = USERNAME
    session.create()
    return admin, user


def test_erasing_a_person_leaves_no_trace_of_them_and_the_audit_still_verifies(person):
    admin, user = person
    audit_chain.seal_pending()  # part of the audit is sealed before the erasure, part is not
    assert len(traces_left()) > 10  # the walk finds them where they are

    done = erase_person(actor=admin, username=USERNAME)

    # what others wrote about them stays (the platform's name for a team, the mail and the event
    # text the portal sent): an erasure rewrites only the person's own rows and what they wrote
    assert sorted(traces_left()) == OTHERS_WORDS
    user.refresh_from_db()
    assert user.username == done.pseudonym == f"erased-{user.pk}"
    assert not user.is_active and not user.has_usable_password() and not user.email
    assert not Membership.objects.filter(user=user).exists()
    assert not OIDCIdentity.objects.filter(user=user).exists()
    assert not ApiToken.objects.filter(user=user, revoked_at__isnull=True).exists()
    assert done.tokens_revoked == 1 and len(done.teams) == 1
    # the erasure is one audit event naming nobody but the pseudonym
    event = audit_chain.AuditEvent.objects.get(verb="person.erased")
    assert event.object_repr == done.pseudonym and event.actor_repr == "root-admin"
    audit_chain.seal_pending()
    result = audit_chain.verify()
    assert result.ok, result.problems
    assert audit_chain.AuditEvent.objects.filter(erased_by=event.pk).exists()


def test_a_name_that_is_also_a_word_stays_in_other_teams_data(db):
    """Security, third pass (7): erasing `submit` rewrote every whole word `submit` in every
    column: other people's token scopes, channel targets, workload specs."""
    admin = PlatformAdminFactory(username="root-admin")
    person = UserFactory(username="submit", email="s.ubmit@example.org")
    other = UserFactory(username="ops-lead")
    theirs_token, _ = token_services.issue_token(
        actor=person, user=person, name="submit laptop", scopes=["submit"]
    )
    others_token, _ = token_services.issue_token(
        actor=other, user=other, name="ci submit", scopes=["read", "submit"]
    )
    channel = NotificationChannel.objects.create(
        tenant=TenantFactory(), kind="webhook", name="submit hook",
        target="https://ops.example/submit",
    )  # fmt: skip
    erase_person(actor=admin, username="submit")
    theirs_token.refresh_from_db()
    others_token.refresh_from_db()
    channel.refresh_from_db()
    assert theirs_token.name == f"erased-{person.pk} laptop"
    assert (others_token.name, others_token.scopes) == ("ci submit", ["read", "submit"])
    assert (channel.name, channel.target) == ("submit hook", "https://ops.example/submit")


def test_a_dry_run_reports_and_changes_nothing(person):
    admin, user = person
    before = traces_left()
    done = erase_person(actor=admin, username=USERNAME, dry_run=True)
    assert done.rewritten and traces_left() == before
    user.refresh_from_db()
    assert user.username == USERNAME and user.is_active


def test_bad_input_is_a_clear_refusal(person):
    admin, user = person
    with pytest.raises(NotFound, match="no user named 'nobody'"):
        erase_person(actor=admin, username="nobody")
    with pytest.raises(Forbidden, match="only platform admins"):
        erase_person(actor=user, username="root-admin")
    with pytest.raises(InvalidInput, match="you are the last platform admin"):
        erase_person(actor=admin, username="root-admin")
    robot = get_user_model().objects.create(username="team-robot")
    TenantFactory(robot=robot)
    with pytest.raises(InvalidInput, match="robot account, not a person"):
        erase_person(actor=admin, username="team-robot")
    erase_person(actor=admin, username=USERNAME)
    with pytest.raises(InvalidInput, match="already erased"):
        erase_person(actor=admin, username=f"erased-{user.pk}")


def test_the_command_erases_and_says_what_it_did(person, capsys):
    _, user = person
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        call_command("erase_person", "nobody")
    call_command("erase_person", USERNAME)
    out = capsys.readouterr().out
    assert f"{USERNAME} is now erased-{user.pk}" in out and "tokens revoked: 1" in out
    assert sorted(traces_left()) == OTHERS_WORDS
