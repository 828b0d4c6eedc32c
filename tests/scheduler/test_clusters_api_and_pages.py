"""Clusters by API and in the console: platform admins list, register, change and archive
them (audited, through the same service); bad input is a 400 that names the field and says
what to change; a kubeconfig is never taken or shown, only the Secret it lives in; what a
health check found wrong is on the cluster's page and in /readyz; others see nothing."""

import pytest
from django.urls import reverse

from scheduler.cluster import fleet, probes
from scheduler.cluster import kube as kube_module
from scheduler.cluster.models import Cluster
from tenants.models import AuditEvent
from tenants.services import tokens as token_services
from tests.portal.api.conftest import bearer, session
from tests.scheduler.fleet_standins import text

pytestmark = pytest.mark.django_db
URL = "/api/v1/clusters/"
EAST = {
    "name": "east",
    "region": "eu-west",
    "preference": 10,
    "group": "gpu",
    "credentials_secret_name": "east-kubeconfig",
}


@pytest.fixture
def manager(world) -> Cluster:
    local = Cluster.objects.create(name="local")
    return fleet.update_cluster(actor=world.admin, cluster=local, role="manager")


def test_a_platform_admin_registers_lists_changes_and_archives_a_worker(world, manager):
    admin = session(world.admin)
    created = admin.post(URL, EAST, format="json")
    assert created.status_code == 201, created.data
    assert created.data["role"] == "worker"
    assert created.data["credentials_secret"] == "kueue-system/east-kubeconfig"
    assert created.data["reachable"] is None and created.data["last_error"] == ""
    listed = admin.get(URL)
    assert [c["name"] for c in listed.data["results"]] == ["east", "local"]  # by preference
    changed = admin.patch(f"{URL}east/", {"preference": 5, "region": "eu-north"}, format="json")
    assert changed.status_code == 200, changed.data
    assert (changed.data["preference"], changed.data["region"]) == (5, "eu-north")
    archived = admin.post(f"{URL}east/archive/")
    assert archived.status_code == 200 and archived.data["archived_at"]
    verbs = list(AuditEvent.objects.filter(object_type="scheduler.Cluster").values_list("verb"))
    assert [v for (v,) in verbs].count("cluster.registered") == 1
    assert {"cluster.updated", "cluster.archived"} <= {v for (v,) in verbs}


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({**EAST, "name": "East 1"}, "name", "is not a DNS label"),
        ({**EAST, "preference": "first"}, "preference", "valid integer"),
        ({**EAST, "preference": 5000}, "preference", "from 0 (tried first) to 1000"),
        ({**EAST, "role": "boss"}, "role", "say one of standalone, manager, worker"),
        ({**EAST, "credentials_secret_name": ""}, "credentials_secret_name", "name it"),
        ({**EAST, "kubeconfig": "apiVersion: v1"}, "kubeconfig", "keeps no kubeconfig"),
        ({k: v for k, v in EAST.items() if k != "name"}, "name", "name the cluster"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(world, manager, body, field, said):
    answer = session(world.admin).post(URL, body, format="json")
    assert answer.status_code == 400, answer.data
    assert field in answer.data["errors"]
    assert said in " ".join(answer.data["errors"][field]) + answer.data["detail"]
    assert not Cluster.objects.filter(role=Cluster.Role.WORKER).exists()
    assert not AuditEvent.objects.filter(verb="cluster.registered").exists()


def test_a_name_does_not_change_and_a_kubeconfig_is_never_taken_on_a_change(world, manager):
    admin = session(world.admin)
    admin.post(URL, EAST, format="json")
    renamed = admin.patch(f"{URL}east/", {"name": "west"}, format="json")
    assert renamed.status_code == 400 and "cannot change" in renamed.data["detail"]
    pasted = admin.patch(f"{URL}east/", {"kubeconfig": text()}, format="json")
    assert pasted.status_code == 400 and "put the kubeconfig in a Secret" in pasted.data["detail"]
    assert "secret-token-value" not in str(AuditEvent.objects.values_list("after", flat=True))


def test_others_see_nothing_and_change_nothing(world, manager):
    fleet.register_cluster(actor=world.admin, **EAST)
    for user in (world.owner, world.member):
        client = session(user)
        assert client.get(URL).data["results"] == []
        assert client.get(f"{URL}east/").status_code == 404
        assert client.post(URL, {**EAST, "name": "west"}, format="json").status_code == 403
        assert client.patch(f"{URL}east/", {"preference": 1}, format="json").status_code == 404
    _, raw = token_services.issue_token(
        actor=world.admin, user=world.admin, name="ro", scopes=["read"]
    )
    read_only = bearer(raw)
    assert read_only.get(f"{URL}east/").status_code == 200
    assert read_only.post(URL, {**EAST, "name": "west"}, format="json").status_code == 403
    assert not Cluster.objects.filter(name="west").exists()


# --- the console -------------------------------------------------------------------------------


def test_the_console_registers_a_worker_and_shows_its_health_not_its_kubeconfig(
    client, world, manager
):
    client.force_login(world.admin)
    page = client.get(reverse("console:cluster_list"))
    assert page.status_code == 200 and "Register a cluster" in page.content.decode()
    posted = client.post(
        reverse("console:cluster_list"),
        {**EAST, "role": "worker", "credentials_secret_namespace": ""},
        follow=True,
    )
    assert posted.status_code == 200
    east = Cluster.objects.get(name="east")
    fleet.record_health(
        east,
        probes.ClusterHealth(
            True, "", "cluster east refuses the credentials in its kubeconfig (401 Unauthorized)"
        ),
    )
    body = client.get(reverse("console:cluster_detail", args=["east"])).content.decode()
    assert "kueue-system/east-kubeconfig" in body
    assert "refuses the credentials in its kubeconfig (401 Unauthorized)" in body
    listed = client.get(reverse("console:cluster_list")).content.decode()
    assert "401 Unauthorized" in listed and "not checked yet" in listed  # local: never checked


def test_a_refused_console_change_says_why_and_writes_nothing(client, world, manager):
    client.force_login(world.admin)
    fleet.register_cluster(actor=world.admin, **EAST)
    answer = client.post(
        reverse("console:cluster_detail", args=["east"]),
        {"role": "worker", "preference": 1, "group": "Not A Label", "credentials_secret_name": ""},
    )
    assert answer.status_code == 400
    body = answer.content.decode()
    assert "is not a DNS label" in body and "name it" in body
    assert Cluster.objects.get(name="east").group == "gpu"


def test_the_console_pages_are_for_platform_admins_only(client, world, manager):
    client.force_login(world.owner)
    assert client.get(reverse("console:cluster_list")).status_code == 403
    assert client.get(reverse("console:cluster_detail", args=["local"])).status_code == 403


# --- /readyz -----------------------------------------------------------------------------------


def test_readyz_says_what_is_wrong_with_a_cluster_without_failing_for_it(
    client, settings, world, manager
):
    east = fleet.register_cluster(actor=world.admin, **EAST)
    fleet.record_health(east, probes.ClusterHealth(False, "", "cluster east does not answer"))
    settings.KUBECONFIG = "/nonexistent/kubeconfig"  # no cluster here: only the fleet's say
    kube_module.reset_gateway()
    try:
        body = client.get(reverse("readyz")).json()
    finally:
        kube_module.reset_gateway()
    assert body["clusters"] == {"east": "cluster east does not answer"}
    assert "clusters" not in body["checks"]  # said, not a check that fails the pod
