"""A cluster's price factor (issue 54: per-cluster prices) is the platform team's to change, by
API and in the console: checked (a 400 that says what to change), audited when it changes."""

import pytest
from django.urls import reverse

from core.errors import InvalidInput
from scheduler.cluster import fleet, probes
from scheduler.cluster.models import Cluster
from tenants.models import AuditEvent
from tests.portal.api.conftest import session

pytestmark = pytest.mark.django_db


@pytest.fixture
def manager(world) -> Cluster:
    local = Cluster.objects.create(name="local")
    return fleet.update_cluster(actor=world.admin, cluster=local, role="manager")


@pytest.mark.parametrize(
    ("factor", "said"),
    [
        ("0", "a number above 0 and at most 100"),
        ("-1", "a number above 0 and at most 100"),
        ("100.001", "a number above 0 and at most 100"),
        ("cheap", "a number above 0 and at most 100"),
        ("NaN", "a number above 0 and at most 100"),
        ("Infinity", "a number above 0 and at most 100"),
        ("1.0005", "more than 3 decimal places"),
    ],
)
def test_a_bad_price_factor_is_a_400_saying_what_to_change(world, manager, factor, said):
    admin = session(world.admin)
    before = AuditEvent.objects.count()
    answer = admin.patch("/api/v1/clusters/local/", {"price_factor": factor}, format="json")
    assert answer.status_code == 400, answer.data
    assert said in " ".join(answer.data["errors"]["price_factor"])
    assert Cluster.objects.get(name="local").price_factor == 1
    assert AuditEvent.objects.count() == before


def test_a_platform_admin_changes_a_price_factor_audited(world, manager, client):
    admin = session(world.admin)
    answer = admin.patch("/api/v1/clusters/local/", {"price_factor": 1.25}, format="json")
    assert answer.status_code == 200, answer.data
    assert answer.data["price_factor"] == "1.250"
    event = AuditEvent.objects.filter(verb="cluster.updated").latest("id")
    assert (event.before["price_factor"], event.after["price_factor"]) == ("1.000", "1.250")
    # the same factor again, spelt otherwise, is no change
    admin.patch("/api/v1/clusters/local/", {"price_factor": "1.25"}, format="json")
    assert AuditEvent.objects.filter(verb="cluster.updated").count() == 2  # the role, the factor
    created = admin.post(
        "/api/v1/clusters/",
        {"name": "cloud", "credentials_secret_name": "cloud-kc", "price_factor": "2.5"},
        format="json",
    )
    assert created.status_code == 201 and created.data["price_factor"] == "2.500"
    refused = admin.post(
        "/api/v1/clusters/",
        {"name": "free", "credentials_secret_name": "free-kc", "price_factor": 0},
        format="json",
    )
    assert refused.status_code == 400 and "price_factor" in refused.data["errors"]
    # the console shows it and changes it through the same service
    client.force_login(world.admin)
    page = client.get(reverse("console:cluster_detail", args=["cloud"])).content.decode()
    assert "× 2.5" in page and "2.5 times the class" in page
    form = {"role": "worker", "preference": 100, "credentials_secret_name": "cloud-kc"}
    bad = client.post(
        reverse("console:cluster_detail", args=["cloud"]), {**form, "price_factor": 0}
    )
    assert bad.status_code == 400 and "a number above 0 and at most 100" in bad.content.decode()
    client.post(reverse("console:cluster_detail", args=["cloud"]), {**form, "price_factor": "3"})
    assert Cluster.objects.get(name="cloud").price_factor == 3
    # an empty factor leaves it as it is
    client.post(reverse("console:cluster_detail", args=["cloud"]), {**form, "price_factor": ""})
    assert Cluster.objects.get(name="cloud").price_factor == 3
    listed = client.get(reverse("console:cluster_list")).content.decode()
    assert "× 3" in listed


@pytest.mark.parametrize("factor", [True, None, "", " ", 0.0, 1e3])
def test_the_service_refuses_what_is_not_a_price_factor(world, manager, factor):
    with pytest.raises(InvalidInput) as refused:
        fleet.update_cluster(actor=world.admin, cluster=manager, price_factor=factor)
    assert "a number above 0 and at most 100" in refused.value.errors["price_factor"][0]


def test_only_platform_admins_change_a_price_factor(world, manager):
    answer = session(world.owner).patch(
        "/api/v1/clusters/local/", {"price_factor": "0.5"}, format="json"
    )
    assert answer.status_code == 404
    assert Cluster.objects.get(name="local").price_factor == 1


def test_probes_judge_is_what_the_page_says(world, manager):
    """The sentence recorded is the judge's, word for word (probes.py is the one source)."""
    health = probes.judge("east", probes.Answers(server="https://e", failure="timed out"))
    fleet.record_health(manager, health)
    assert fleet.fleet_problems() == {"local": health.problem}
