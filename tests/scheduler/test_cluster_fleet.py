"""Clusters as data: a single-cluster install stays standalone; the platform team makes its own
cluster the manager and registers workers, each change checked (what to change), audited and
made under a lock; a worker's door is built from the kubeconfig in its Secret and kept while
the Secret holds the same one; a health check's verdict is recorded, audited when it changes."""

import pytest

from core.errors import Forbidden, InvalidInput, InvalidTransition, PermanentClusterError
from scheduler.cluster import doors, fleet, inventory, kube, probes
from scheduler.cluster.models import Cluster
from tenants.models import AuditEvent
from tests.scheduler.fleet_standins import (
    CLUSTERQUEUE_CRD,
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


@pytest.fixture
def manager(world) -> Cluster:
    local = Cluster.objects.create(name="local")  # as the first inventory sync makes it
    return fleet.update_cluster(actor=world.admin, cluster=local, role="manager")


def test_the_existing_single_cluster_is_standalone_and_reached_as_before(world, monkeypatch):
    process_gateway = object()
    monkeypatch.setattr(kube, "gateway", lambda: process_gateway)
    assert doors.door() is process_gateway  # the default name, even with no row yet
    local = Cluster.objects.create(name="local")
    assert local.role == Cluster.Role.STANDALONE and local.is_home
    assert local.credentials_secret == ""
    assert doors.door("local") is process_gateway


def test_a_worker_is_registered_behind_a_manager_and_audited(world, manager):
    east = fleet.register_cluster(
        actor=world.admin,
        name="east",
        region="eu-west",
        preference=10,
        group="gpu",
        credentials_secret_name="east-kubeconfig",
    )
    assert east.role == Cluster.Role.WORKER and not east.is_home
    assert east.credentials_secret == "kueue-system/east-kubeconfig"  # Kueue's, by default
    assert east.reachable is None  # not checked yet
    event = AuditEvent.objects.get(verb="cluster.registered")
    assert event.after == {
        "name": "east",
        "role": "worker",
        "region": "eu-west",
        "preference": 10,
        "group": "gpu",
        "price_factor": "1.000",  # the list price unless said
        "credentials_secret_namespace": "kueue-system",
        "credentials_secret_name": "east-kubeconfig",
    }
    assert AuditEvent.objects.filter(verb="cluster.updated").count() == 1  # local → manager
    assert list(Cluster.objects.workers()) == [east]


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"name": "East_1"}, "name", "is not a DNS label"),
        ({"name": "x" * 41}, "name", "at most 40"),
        ({"role": "boss"}, "role", "say one of standalone, manager, worker"),
        ({"region": "EU West"}, "region", "is not a DNS label"),
        ({"group": "GPU!"}, "group", "is not a DNS label"),
        ({"preference": -1}, "preference", "from 0 (tried first) to 1000"),
        ({"preference": 1001}, "preference", "from 0 (tried first) to 1000"),
        ({"credentials_secret_name": ""}, "credentials_secret_name", "name it"),
        ({"credentials_secret_name": "East/Config"}, "credentials_secret_name", "not a Secret"),
        ({"credentials_secret_namespace": "Kueue"}, "credentials_secret_namespace", "DNS label"),
        (
            {"role": "manager", "credentials_secret_name": ""},
            "role",
            "cluster local is already the portal's own (manager)",
        ),
        ({"role": "standalone", "credentials_secret_name": ""}, "role", "already the portal's"),
    ],
)
def test_bad_input_says_what_to_change_and_writes_nothing(world, manager, fields, field, said):
    values = {"name": "east", "credentials_secret_name": "east-kubeconfig", **fields}
    with pytest.raises(InvalidInput) as refused:
        fleet.register_cluster(actor=world.admin, **values)
    assert field in refused.value.errors
    assert said in " ".join(refused.value.errors[field])
    assert not Cluster.objects.filter(name=values["name"]).exists()
    assert not AuditEvent.objects.filter(verb="cluster.registered").exists()


def test_every_bad_field_is_said_at_once(world, manager):
    with pytest.raises(InvalidInput) as refused:
        fleet.register_cluster(actor=world.admin, name="Bad Name", preference=5000, group="A B")
    assert set(refused.value.errors) == {"name", "preference", "group", "credentials_secret_name"}


def test_the_portals_own_cluster_takes_no_secret_and_no_group(world):
    local = Cluster.objects.create(name="local")
    with pytest.raises(InvalidInput) as refused:
        fleet.update_cluster(
            actor=world.admin, cluster=local, credentials_secret_name="x", group="gpu"
        )
    assert "leave the Secret empty" in refused.value.errors["credentials_secret_name"][0]
    assert "only workers are in groups" in refused.value.errors["group"][0]


def test_a_worker_needs_a_manager_and_a_manager_with_workers_stays_one(world):
    with pytest.raises(InvalidInput, match="register the portal's own cluster as the manager"):
        fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    local = Cluster.objects.create(name="local")
    with pytest.raises(InvalidInput, match="make local the manager first \\(it is standalone\\)"):
        fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    fleet.update_cluster(actor=world.admin, cluster=local, role="manager")
    fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    with pytest.raises(InvalidInput, match="workers east are registered: archive them first"):
        fleet.update_cluster(actor=world.admin, cluster=local, role="standalone")
    east = Cluster.objects.get(name="east")
    inventory.archive_cluster(actor=world.admin, cluster=east)
    assert fleet.update_cluster(actor=world.admin, cluster=local, role="standalone").role == (
        Cluster.Role.STANDALONE
    )


def test_names_stay_taken_and_archived_clusters_do_not_change(world, manager):
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    with pytest.raises(InvalidInput, match="a cluster 'east' is registered already"):
        fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    with pytest.raises(InvalidInput, match="cannot change name"):
        fleet.update_cluster(actor=world.admin, cluster=east, name="west")
    inventory.archive_cluster(actor=world.admin, cluster=east)
    with pytest.raises(InvalidTransition, match="archived"):
        fleet.update_cluster(actor=world.admin, cluster=east, preference=1)
    with pytest.raises(InvalidInput, match="registered already"):
        fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")


def test_only_platform_admins_register_or_change_clusters(world, manager):
    with pytest.raises(Forbidden, match="only platform admins may register clusters"):
        fleet.register_cluster(actor=world.owner, name="east", credentials_secret_name="s")
    with pytest.raises(Forbidden, match="only platform admins may change clusters"):
        fleet.update_cluster(actor=world.owner, cluster=manager, region="eu")


def test_an_unchanged_save_is_not_audited(world, manager):
    before = AuditEvent.objects.count()
    fleet.update_cluster(actor=world.admin, cluster=manager, role="manager")
    assert AuditEvent.objects.count() == before


def test_a_health_verdict_is_recorded_and_audited_only_when_it_changes(world, manager):
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    bad = probes.ClusterHealth(False, "", "cluster east does not answer")
    fleet.record_health(east, bad)
    fleet.record_health(east, bad)
    east.refresh_from_db()
    assert (east.reachable, east.last_error) == (False, "cluster east does not answer")
    assert east.checked_at is not None
    assert AuditEvent.objects.filter(verb="cluster.health_changed").count() == 1
    assert fleet.fleet_problems() == {"east": "cluster east does not answer"}
    fleet.record_health(east, probes.ClusterHealth(True, "0.19 or newer"))
    assert fleet.fleet_problems() == {}
    assert AuditEvent.objects.filter(verb="cluster.health_changed").count() == 2


# --- a worker's door, from its Secret ------------------------------------------------------------


class HomeWithSecrets:
    """The home gateway as far as doors.py uses it: Secrets by (namespace, name)."""

    def __init__(self):
        self.secrets: dict[tuple[str, str], dict] = {}
        self.reads = 0

    def get(self, kind, name, namespace=None):
        assert kind == "Secret"
        self.reads += 1
        return self.secrets.get((namespace, name))


@pytest.fixture
def home(monkeypatch):
    gateway = HomeWithSecrets()
    monkeypatch.setattr(kube, "gateway", lambda: gateway)
    return gateway


@pytest.fixture
def stand_in():
    server = StandInApiServer(crds=(CLUSTERQUEUE_CRD, MULTIKUEUE_019))
    yield server
    server.close()


def test_a_workers_door_is_built_from_its_secret_and_kept_while_it_holds(
    world, manager, home, stand_in, monkeypatch
):
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="east-kc")
    home.secrets[("kueue-system", "east-kc")] = secret(text(kubeconfig(server=stand_in.url)))
    door = doors.door("east")
    assert door is not home and door.server_version() == "v1.36.3"
    assert doors.door("east") is door and home.reads == 1  # cached
    monkeypatch.setattr(doors, "SECRET_TTL_S", 0.0)
    assert doors.door("east") is door and home.reads == 2  # read again, the same kubeconfig
    rotated = kubeconfig(server=stand_in.url, users={"token": "a-new-token"})
    home.secrets[("kueue-system", "east-kc")] = secret(text(rotated))
    assert doors.door("east") is not door  # a rotated kubeconfig is a new door
    assert fleet.check_cluster(east).ok
    east.refresh_from_db()
    assert (east.reachable, east.kueue_version, east.last_error) == (True, "0.19 or newer", "")


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        (None, "cluster east: there is no Secret kueue-system/east-kc"),
        (secret(text(kubeconfig(users={"tokenFile": "/t"}))), "sets tokenFile"),
    ],
)
def test_a_secret_that_will_not_do_is_a_credentials_problem_on_the_page(
    world, manager, home, stored, said
):
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="east-kc")
    if stored is not None:
        home.secrets[("kueue-system", "east-kc")] = stored
    with pytest.raises(doors.CredentialsProblem, match=said):
        doors.door("east")
    health = fleet.check_cluster(east)
    assert health.reachable is None and said in health.problem
    assert said in fleet.fleet_problems()["east"]


def test_unknown_and_archived_clusters_have_no_door(world, manager, home):
    with pytest.raises(PermanentClusterError, match="no cluster 'west' is registered"):
        doors.door("west")
    east = fleet.register_cluster(actor=world.admin, name="east", credentials_secret_name="s")
    inventory.archive_cluster(actor=world.admin, cluster=east)
    with pytest.raises(PermanentClusterError, match="cluster 'east' is archived"):
        doors.door("east")
