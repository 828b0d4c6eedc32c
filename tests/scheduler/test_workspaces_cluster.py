"""Workspaces on the real local cluster (issue 33, item 1): a member opens a notebook on a 1g
slice; its volume claim, Service and Ingress are in the team's namespace and Kueue admits its
run; the link's auth request lets the member in and refuses another team's member and an
anonymous caller; the culling pass warns, then stops it (the volume kept), and restart brings it
back. KWOK pods run no server, so the pass is handed readers of the test's own (the real ones
ask Jupyter's /api/status and DCGM: docs/workspaces.md)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from kubernetes.client.rest import ApiException

from catalog.models import ResourceClass
from catalog.services import ensure_resource_classes, set_pool
from scheduler.workloads.lifecycle import sync as workload_sync
from scheduler.workloads.models import Workload
from tenants.services.tenants import add_member
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import team, wait_state
from tests.scheduler.test_reclaim_cluster import kueue_workload
from workspaces import culling, services
from workspaces import sync as workspace_sync
from workspaces.manifests import WORKSPACE_LABEL, claim_name, object_name
from workspaces.models import Workspace

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def one_g(world):
    ensure_resource_classes(["A100-80GB"])
    rc = ResourceClass.objects.get(slug="a100-80gb-mig-1g.10gb")
    set_pool(actor=world.admin, resource_class=rc, capacity=7)
    return rc


class Said:
    """A reader standing in for the server and DCGM (KWOK pods run nothing)."""

    def __init__(self, activity, use):
        self.activity, self.use = activity, use

    def last_activity(self, workspace):
        return self.activity

    def gpu_use(self, workspace, pods):
        return self.use if pods else None


@pytest.fixture
def homes(kube_cluster, tenant_namespaces):
    """Gives a workspace's claim a volume, as a platform's storage would: a volume made for it
    (claimRef) that the local cluster's volume binder binds (the scheduler refuses a pod whose
    claim is not bound); lifts the protection finalizers afterwards, or the namespace would
    stay Terminating."""
    core, made = kube_cluster.core, []

    def bind(ns: str, claim: str) -> None:
        volume = unique_slug("ws-home")
        wanted = core.read_namespaced_persistent_volume_claim(claim, ns)
        core.create_persistent_volume(
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": wanted.spec.storage_class_name or "",
                    "hostPath": {"path": "/srv/homes"},
                    "claimRef": {"namespace": ns, "name": claim},
                },
            }
        )
        made.append((ns, claim, volume))
        wait_for(
            f"{claim} bound",
            lambda: core.read_namespaced_persistent_volume_claim(claim, ns).status.phase == "Bound",
        )

    yield bind
    for ns, claim, volume in made:
        _unbind(core, ns, claim, volume)


def _unbind(core, ns: str, claim: str, volume: str) -> None:
    unprotected = {"metadata": {"finalizers": None}}
    for call in (
        lambda: core.patch_namespaced_persistent_volume_claim(claim, ns, unprotected),
        lambda: core.delete_namespaced_persistent_volume_claim(claim, ns),
        lambda: core.patch_persistent_volume(volume, unprotected),
        lambda: core.delete_persistent_volume(volume),
    ):
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_a_member_opens_a_notebook_on_a_1g_slice_it_is_culled_when_idle_and_restarts(
    kube, tenant_namespaces, world, one_g, homes, settings, client
):
    settings.PORTAL_INSTANCE = unique_slug("ws")  # a cohort of its own
    settings.WORKSPACE_STORAGE_CLASS = "manual"
    settings.WORKSPACE_IDLE_AFTER_S, settings.WORKSPACE_IDLE_NOTICE_S = 3600, 900
    # a gateway in a namespace of its own (the chart's proxy runs in the platform namespace)
    settings.WORKSPACE_INGRESS_NAMESPACE = "gateway-system"
    tenant = team(world, kube, tenant_namespaces, one_g, 1, prefix="ws", classes=("gpu-high",))
    ns = tenant.namespace

    ws = services.open_workspace(
        actor=world.member,
        tenant=tenant,
        name="nb",
        kind="jupyter",
        image="quay.io/jupyter/pytorch-notebook:cuda12-latest",
        resource_class=one_g.slug,
        time_limit_h="8",
    )
    # what the task applies on commit: the home claim, a ClusterIP Service, the server's Secret
    # (created, never read: the portal's account may not get Secrets), and no Ingress
    applied = workspace_sync.apply_objects(kube, ws.pk)
    assert applied == ["PersistentVolumeClaim/ws-nb-home", "Service/ws-nb", "Secret/ws-nb-server"]
    assert workspace_sync.apply_objects(kube, ws.pk) == applied  # twice: the same
    claim = kube.get("PersistentVolumeClaim", claim_name("nb"), ns)
    service = kube.get("Service", object_name("nb"), ns)
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert service["spec"]["type"] == "ClusterIP"
    assert kube.get("Ingress", object_name("nb"), ns) is None
    homes(ns, claim_name("nb"))

    # the ingress controller's namespace may reach the server's port on workspace pods (and
    # nothing else): a policy of its own, as policies add up
    policy = kube.get("NetworkPolicy", "gpu-portal-workspaces", ns)
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8888}]
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["key"] == WORKSPACE_LABEL
    assert len(kube.get("NetworkPolicy", "gpu-portal-isolation", ns)["spec"]["ingress"]) == 1

    run = Workload.objects.get(pk=ws.run_id)
    workload_sync.create_in_cluster(kube, run.pk)
    job = kube.get("Job", run.k8s_name, ns)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == str(8 * 3600)
    run = wait_state(kube, run, "running")
    assert kueue_workload(kube, run)["status"]["admission"]["clusterQueue"] == ns
    (pod,) = kube.list("Pod", ns, label_selector=f"{WORKSPACE_LABEL}={ws.pk}")
    assert pod["spec"]["priorityClassName"] == "gpu-high"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]]
    assert claims == [claim_name("nb")]
    token = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "JUPYTER_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "ws-nb-server", "key": "token"}

    # the link: its owner sent on with a ticket; the team's owner, another team's member and an
    # anonymous caller not (issue 51)
    opens = reverse("workspaces:workspace_open", args=[ws.pk])
    assert client.get(opens)["Location"].startswith("/accounts/login/")
    client.force_login(world.outsider)
    assert client.get(opens).status_code == 404
    add_member(actor=world.admin, tenant=tenant, username=world.owner.username, role="owner")
    client.force_login(world.owner)  # the team's owner, not the workspace's: refused
    assert client.get(opens).status_code == 403
    client.force_login(world.member)
    assert client.get(opens).status_code == 302

    # activity in the window keeps it alive
    start = timezone.now()
    later = start + timedelta(minutes=55)
    active = Said(later - timedelta(minutes=3), Decimal("0"))
    assert culling.cull_workspaces(kube, activity=active, gpu=active, now=later).warned == []
    # no activity since the start and no GPU use: warned, then stopped after the notice
    idle = Said(start - timedelta(hours=2), Decimal("0.01"))
    warned = culling.cull_workspaces(kube, activity=idle, gpu=idle, now=later)
    assert warned.warned == [ws.pk]
    stopped = culling.cull_workspaces(
        kube, activity=idle, gpu=idle, now=later + timedelta(minutes=16)
    )
    assert stopped.stopped == [ws.pk]
    ws = Workspace.objects.select_related("run").get(pk=ws.pk)
    assert ws.state == Workspace.State.STOPPED and ws.run.reason == "IdleSuspended"
    wait_for(
        "the run's pod gone",
        lambda: not kube.list("Pod", ns, label_selector=f"{WORKSPACE_LABEL}={ws.pk}"),
        timeout=30,
    )
    assert kube.get("PersistentVolumeClaim", claim_name("nb"), ns) is not None  # kept
    reasons = list(ws.run.events.values_list("reason", flat=True))
    assert "IdleWarning" in reasons and "IdleSuspended" in reasons

    # one click back: the same run resumed through Kueue, on the same volume
    services.restart_workspace(actor=world.member, workspace=ws, kube=kube)
    wait_state(kube, ws.run, "running")
    (pod,) = kube.list("Pod", ns, label_selector=f"{WORKSPACE_LABEL}={ws.pk}")
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim_name("nb")
