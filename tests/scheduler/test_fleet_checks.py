"""The fleet's health on beat (issue 54, items 1 and 5): every active cluster is checked on its
own, one that is down, refuses the credentials, runs no Kueue or an older one stops no other,
and each says what to change on its page and under `clusters` in /readyz."""

from __future__ import annotations

import socket

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from scheduler.cluster import doors, fleet, kube, tasks
from scheduler.cluster.models import Cluster
from tenants.models import AuditEvent
from tests.scheduler.fleet_standins import (
    CLUSTERQUEUE_CRD,
    MULTIKUEUE_018,
    MULTIKUEUE_019,
    StandInApiServer,
    kubeconfig,
    secret,
    text,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_doors():
    doors.forget()
    yield
    doors.forget()
    kube.reset_gateway()


class FleetApiServer(StandInApiServer):
    """The manager's API server: Kueue's CRDs as told, and the workers' kubeconfig Secrets."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.secrets: dict[str, dict] = {}

    def answer(self, path: str) -> tuple[int, dict]:
        if "/secrets/" in path and self.status == 200:
            name = path.rsplit("/", 1)[-1]
            if name in self.secrets:
                return 200, self.secrets[name]
        return super().answer(path)


def closed_port_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def servers():
    made: dict[str, StandInApiServer] = {
        "manager": FleetApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_019)),
        "healthy": StandInApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_019)),
        "refusing": StandInApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_019)),
        "bare": StandInApiServer(crds=()),  # no Kueue at all
        "older": StandInApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_018)),
    }
    made["refusing"].status = 401
    yield made
    for server in made.values():
        server.close()


@pytest.fixture
def fleet_of_five(world, servers, monkeypatch):
    """The manager (the portal's own cluster, through a kubeconfig here) and five workers: one
    healthy, one that does not answer, one that refuses the credentials, one without Kueue and
    one with Kueue 0.18."""
    manager = servers["manager"]
    monkeypatch.setattr(django_settings, "KUBECONFIG", "", raising=False)
    home = kube.KubeGateway.from_kubeconfig_text(text(kubeconfig(server=manager.url)))
    monkeypatch.setattr(kube, "gateway", lambda: home)
    local = Cluster.objects.create(name="local")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    urls = {
        "healthy": servers["healthy"].url,
        "down": closed_port_url(),
        "refusing": servers["refusing"].url,
        "bare": servers["bare"].url,
        "older": servers["older"].url,
    }
    for n, (name, url) in enumerate(urls.items()):
        fleet.register_cluster(
            actor=world.admin, name=name, preference=n, credentials_secret_name=f"{name}-kc"
        )
        manager.secrets[f"{name}-kc"] = secret(text(kubeconfig(server=url)))
    return urls


SAID = {
    "down": "does not answer: check the server address in its kubeconfig",
    "refusing": "refuses the credentials in its kubeconfig (401 Unauthorized)",
    "bare": "Kueue is not installed on cluster bare",
    "older": "is older than 0.19, which MultiKueue's dispatch in the platform's order needs",
}


def test_the_beat_task_checks_every_cluster_each_on_its_own(fleet_of_five, client, world):
    said = tasks.check_clusters()
    assert said["local"] == "ok" and said["healthy"] == "ok"
    for name, words in SAID.items():
        assert words in said[name], (name, said[name])
    rows = {c.name: c for c in Cluster.objects.all()}
    assert rows["healthy"].reachable is True and rows["healthy"].kueue_version == "0.19 or newer"
    assert rows["down"].reachable is False
    assert rows["bare"].kueue_version == "not installed"
    assert all(c.checked_at is not None for c in rows.values())
    # each on its page, in a sentence that says what to change ...
    client.force_login(world.admin)
    for name, words in SAID.items():
        page = client.get(reverse("console:cluster_detail", args=[name])).content.decode()
        assert words.replace("'", "&#x27;") in page, name
    listed = client.get(reverse("console:cluster_list")).content.decode()
    assert all(words.replace("'", "&#x27;") in listed for words in SAID.values())
    # ... and in /readyz, said, not failed for (the manager itself answers)
    body = client.get(reverse("readyz")).json()
    assert sorted(body["clusters"]) == sorted(SAID)
    for name, words in SAID.items():
        assert words in body["clusters"][name]
    assert "clusters" not in body["checks"]
    # one audit event per verdict that changed, none on a check that finds the same
    first = AuditEvent.objects.filter(verb="cluster.health_changed").count()
    assert first == 6  # the manager and five workers, each from unknown to a verdict
    tasks.check_clusters()
    assert AuditEvent.objects.filter(verb="cluster.health_changed").count() == first


def test_one_clusters_failure_of_any_kind_stops_no_other(fleet_of_five, monkeypatch):
    real = fleet.check_cluster

    def check(cluster):
        if cluster.name == "bare":
            raise RuntimeError("a probe's own bug")
        return real(cluster)

    monkeypatch.setattr(fleet, "check_cluster", check)
    said = tasks.check_clusters()
    assert said["bare"] == "not checked: a probe's own bug"
    assert said["healthy"] == "ok" and "401 Unauthorized" in said["refusing"]
    assert Cluster.objects.get(name="older").checked_at is not None  # after "bare" by name


def test_a_worker_that_recovers_is_said_to_be_well_again(fleet_of_five, servers, client, world):
    servers["refusing"].status = 401
    tasks.check_clusters()
    servers["refusing"].status = 200
    assert tasks.check_clusters()["refusing"] == "ok"
    assert "refusing" not in fleet.fleet_problems()


def test_archived_clusters_are_not_checked(fleet_of_five, world):
    from scheduler.cluster import inventory

    inventory.archive_cluster(actor=world.admin, cluster=Cluster.objects.get(name="down"))
    assert "down" not in tasks.check_clusters()


def test_the_check_runs_on_beat_at_the_period_the_setting_gives():
    entry = django_settings.CELERY_BEAT_SCHEDULE["check-clusters"]
    assert entry["task"] == "scheduler.tasks.check_clusters"
    assert entry["schedule"] == django_settings.CLUSTER_CHECK_EVERY_S
    assert 0 < entry["options"]["expires"] < entry["schedule"]
    assert tasks.check_clusters.name == "scheduler.tasks.check_clusters"


def test_the_home_clusters_name_is_that_of_the_portals_own(world):
    assert fleet.home_cluster_name() == "local"  # a new install: no row yet
    Cluster.objects.create(name="hq", role=Cluster.Role.MANAGER)
    assert fleet.home_cluster_name() == "hq"
