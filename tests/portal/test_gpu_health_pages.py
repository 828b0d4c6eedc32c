"""The console's GPU health page: admins only, the policy edited with clear refusals, an
acknowledgement of a node with nothing open refused without a 500; every change audited."""

import pytest
from django.urls import reverse

from scheduler.cluster.models import Cluster
from scheduler.health import rules as health_rules
from scheduler.health.models import HealthEvent, HealthImpact, HealthRule, NodeHealth
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db

RULE = {
    "signal": "gpu_temp",
    "threshold": "90",
    "clear_below": "85",
    "action": "warn",
    "clear_after_s": "120",
    "enabled": "on",
}


def test_only_platform_admins_see_or_change_gpu_health(client, world):
    client.force_login(world.owner)
    assert client.get(reverse("console:gpu_health")).status_code == 403
    assert client.post(reverse("console:gpu_health_rule_add"), RULE).status_code == 403
    assert client.post(reverse("console:gpu_health_ack", args=["n1"])).status_code == 403
    assert not HealthRule.objects.filter(threshold=90).exists()


def test_without_prometheus_the_page_says_checks_are_off(client, world, settings):
    settings.PROMETHEUS_URL = ""
    client.force_login(world.admin)
    page = client.get(reverse("console:gpu_health")).content.decode()
    assert "GPU health checks are off: no Prometheus is configured" in page


def test_the_page_starts_from_the_default_policy_and_lists_sick_nodes(client, world):
    cluster = Cluster.objects.create(name="local")
    NodeHealth.objects.create(cluster=cluster, node_name="b200-0", state="sick", tainted=True)
    event = HealthEvent.objects.create(
        cluster=cluster,
        node_name="b200-0",
        gpu="3",
        signal="xid",
        action="drain",
        description="XID 79 (GPU has fallen off the bus)",
    )
    HealthImpact.objects.create(
        event=event, pod_uid="u", namespace="team-a-ns", pod_name="train-0", outcome="evicted"
    )
    client.force_login(world.admin)
    page = client.get(reverse("console:gpu_health")).content.decode()
    assert HealthRule.objects.filter(signal="xid", xid_code=79, action="drain").exists()
    assert "GPU 3 on node b200-0" in page and "XID 79 (GPU has fallen off the bus)" in page
    assert "team-a-ns/train-0: stopped (evicted)" in page
    assert "Acknowledge" in page


def test_a_rule_is_added_and_changed_with_an_audit_trail(client, world):
    client.force_login(world.admin)
    response = client.post(reverse("console:gpu_health_rule_add"), RULE)
    assert response.status_code == 302
    rule = HealthRule.objects.get(signal="gpu_temp", threshold=90)
    assert (rule.action, rule.clear_after_s) == ("warn", 120)
    changed = client.post(
        reverse("console:gpu_health_rule", args=[rule.pk]), {**RULE, "action": "taint"}
    )
    assert changed.status_code == 302
    rule.refresh_from_db()
    assert rule.action == "taint"
    verbs = list(
        AuditEvent.objects.filter(object_id=str(rule.pk), verb__startswith="health_rule.")
        .order_by("id")
        .values_list("verb", flat=True)
    )
    assert verbs == ["health_rule.created", "health_rule.changed"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"clear_below": "95"}, "must be at most the threshold"),
        ({"threshold": ""}, "needs a threshold"),
        ({"xid_code": "79"}, "only XID rules have a code"),
        ({"signal": "xid", "threshold": "3"}, "an XID rule has a code, not a threshold"),
        ({"threshold": "abc"}, "Enter a number"),
        ({"action": "reboot"}, "Select a valid choice"),
        ({"clear_after_s": "-5"}, "greater than or equal to 0"),
    ],
)
def test_a_rule_that_could_not_work_is_refused_with_what_to_change(client, world, change, says):
    client.force_login(world.admin)
    response = client.post(reverse("console:gpu_health_rule_add"), {**RULE, **change})
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not HealthRule.objects.filter(signal=RULE["signal"], threshold=90).exists()


def test_a_second_rule_for_the_same_xid_is_refused(client, world):
    health_rules.ensure_default_rules()
    client.force_login(world.admin)
    response = client.post(
        reverse("console:gpu_health_rule_add"),
        {"signal": "xid", "xid_code": "79", "action": "warn", "clear_after_s": "0"},
    )
    assert response.status_code == 400
    assert "a rule for XID 79 exists already" in response.content.decode()
    assert HealthRule.objects.filter(signal="xid", xid_code=79).count() == 1


@pytest.mark.parametrize("node", ["no-such-node", "n%20with%20space", "x" * 300])
def test_acknowledging_a_node_with_nothing_open_says_so(client, world, node):
    Cluster.objects.create(name="local")
    client.force_login(world.admin)
    response = client.post(f"/console/gpu-health/nodes/{node}/ack/", follow=True)
    assert response.status_code == 200
    assert "has no open health events: nothing to acknowledge" in response.content.decode()
    assert not AuditEvent.objects.filter(verb="gpu_health.event_closed").exists()
