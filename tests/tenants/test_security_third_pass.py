"""Security, third pass (5, 6): every token ends, a CI robot token ends with the person who
made it (leaving the team or being erased revokes it, and the owners are told), and no member
reads a channel's Slack URL in the audit log."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from portal.erasure import erase_person
from tenants.models import ApiToken, AuditEvent, Membership, NotificationDelivery
from tenants.services.tenants import add_member, create_tenant, remove_member
from tenants.services.tokens import give_tokens_an_expiry, issue_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(world):
    tenant = create_tenant(actor=world.admin, slug="team-robot", name="Robots")
    add_member(actor=world.admin, tenant=tenant, username=world.owner.username, role="owner")
    add_member(actor=world.admin, tenant=tenant, username=world.member.username, role="owner")
    return tenant


def test_a_token_asked_without_an_end_gets_the_platforms_longest(world, settings):
    settings.API_TOKEN_MAX_DAYS = 30
    before = timezone.now()
    token, _ = issue_token(actor=world.member, user=world.member, name="ci", scopes=["read"])
    assert before + timedelta(days=30) <= token.expires_at <= timezone.now() + timedelta(days=30)
    with pytest.raises(InvalidInput, match="at most 30 days") as refused:
        issue_token(
            actor=world.member,
            user=world.member,
            name="forever",
            scopes=["read"],
            expires_at=timezone.now() + timedelta(days=31),
        )
    assert refused.value.field == "expires_at"
    assert ApiToken.objects.filter(user=world.member).count() == 1


def test_a_token_made_before_the_rule_is_given_an_end_with_notice(world, settings):
    settings.API_TOKEN_MAX_DAYS = 90
    token, _ = issue_token(actor=world.member, user=world.member, name="old", scopes=["read"])
    ApiToken.objects.filter(pk=token.pk).update(expires_at=None)  # as tokens made before it
    now = timezone.now()
    assert give_tokens_an_expiry(now) == 1
    token.refresh_from_db()
    assert token.expires_at == now + timedelta(days=90)
    assert AuditEvent.objects.filter(verb="api_token.expiry_set", object_id=str(token.pk)).exists()
    assert NotificationDelivery.objects.filter(event="api_token.expiry_set").exists()
    assert give_tokens_an_expiry(now) == 0  # level-triggered: nothing twice


def test_leaving_the_team_revokes_the_robot_tokens_one_made_and_tells_the_owners(world, team):
    mine, _ = issue_token(actor=world.member, user=team.robot, name="mine", scopes=["submit"])
    theirs, _ = issue_token(actor=world.owner, user=team.robot, name="theirs", scopes=["read"])
    membership = Membership.objects.get(tenant=team, user=world.member)
    remove_member(actor=world.owner, membership=membership)
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None
    event = AuditEvent.objects.get(verb="api_token.revoked", object_id=str(mine.pk))
    assert "left the team" in event.after["reason"]
    assert NotificationDelivery.objects.filter(event="api_token.revoked_with_maker").exists()


def test_erasure_revokes_the_robot_tokens_the_person_made(world, team):
    mine, _ = issue_token(actor=world.member, user=team.robot, name="mine", scopes=["submit"])
    erase_person(actor=world.admin, username=world.member.username)
    mine.refresh_from_db()
    assert mine.revoked_at is not None


def test_a_viewer_never_reads_a_slack_url_in_the_audit_log(world):
    """Security, third pass (6): the channel API cut the URL, its audit rows kept it whole."""
    from tenants.services import channels as channel_services
    from tests.portal.api.conftest import session

    secret_path = "T0/B0/secret-path"
    slack, _ = channel_services.create_channel(
        actor=world.owner,
        tenant=world.tenant,
        kind="slack",
        name="ml-chat",
        target=f"https://hooks.slack.com/services/{secret_path}",
    )
    # a row written before the services cut it (they cannot be rewritten without the sealed
    # erasure path): the API cuts it as it answers
    AuditEvent.objects.create(
        verb="notification_channel.changed",
        object_type="tenants.NotificationChannel",
        object_id=str(slack.pk),
        tenant=world.tenant,
        after={"kind": "slack", "target": f"https://hooks.slack.com/services/{secret_path}"},
    )
    stored = AuditEvent.objects.filter(object_type="tenants.NotificationChannel")
    assert not any(secret_path in str(e.after) for e in stored.exclude(actor_repr=""))
    answer = session(world.viewer).get("/api/v1/audit-events/", {"page_size": 100})
    assert answer.status_code == 200
    assert secret_path not in answer.content.decode()
    assert "hooks.slack.com/…" in answer.content.decode()


def test_robot_tokens_of_someone_who_left_before_the_rule_are_revoked_by_the_daily_task(
    world, team
):
    """Whoever left a team before leaving revoked their robot tokens: the daily task finds
    their tokens and revokes them, as a leaving does now; the stayers' tokens stay."""
    from tenants.tasks import give_tokens_an_expiry as daily

    gone, _ = issue_token(actor=world.member, user=team.robot, name="gone", scopes=["read"])
    kept, _ = issue_token(actor=world.owner, user=team.robot, name="kept", scopes=["read"])
    Membership.objects.filter(tenant=team, user=world.member).delete()  # left the old way
    assert daily() == 1
    gone.refresh_from_db()
    kept.refresh_from_db()
    assert gone.revoked_at is not None and kept.revoked_at is None
    assert daily() == 0
