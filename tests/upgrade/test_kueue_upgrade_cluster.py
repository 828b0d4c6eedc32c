"""An install made by the previous release, upgraded (issue 44, item 5): the local cluster runs
the previous release's Kueue (v0.17.0, with the settings that release gave it) while the portal
makes a team, its grant, a running and a queued workload; then Kueue is upgraded in place to the
checkout's (its CRDs and webhooks applied over the old, the new controller on the objects the
old one made) and the portal reconciles. Nothing is lost (the running job keeps its admission,
the queued one waits and then runs under the new Kueue) and nothing is made again (every object
keeps its uid, the reconcile writes nothing)."""

import pytest

from localcluster import build, cluster, previous_release
from scheduler.cluster import support
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.workloads import services as workloads
from scheduler.workloads.lifecycle import sync as workload_sync
from tests.scheduler.cluster_helpers import unique_slug, wait_for
from tests.scheduler.test_kueue_cluster import (
    h100_mig,  # noqa: F401 - a fixture
    submit,
    team,
    wait_state,
)
from tests.scheduler.test_kueue_reasons_cluster import said

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


@pytest.fixture
def previous_kueue(kube_cluster):
    previous_release.run_previous_kueue()
    try:
        yield
    finally:
        cluster.up()  # the checkout's Kueue again, whatever the test did


class PreviousRelease:
    """The previous release's gateway had no version check: it wrote to Kueue v0.17."""

    def require(self) -> None:
        pass

    def verdict(self, *, fresh: bool = False) -> support.Verdict:
        return support.Verdict("", "not checked")


def kueue_version() -> str:
    """The running Kueue's version: its binary lies in the build folder of its version."""
    pid = int((cluster.RUN / "kueue.pid").read_text())
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        argv0 = cmdline.read().split(b"\0")[0].decode()
    return argv0.split("/kueue-")[-1].split("/")[0]


def snapshot(kube_admin, tenant, *workloads_) -> dict[str, str]:
    """uid of every object the portal and Kueue made for the team: a re-made one has a new uid."""
    ns = tenant.namespace
    out = {
        f"Namespace/{ns}": kube_admin.get("Namespace", ns)["metadata"]["uid"],
        f"ClusterQueue/{ns}": kube_admin.get("ClusterQueue", ns)["metadata"]["uid"],
    }
    for kind in ("LocalQueue", "ResourceQuota", "Role", "RoleBinding", "NetworkPolicy", "Job"):
        for obj in kube_admin.list(kind, ns):
            out[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
    for flavor in kube_admin.list("ResourceFlavor"):
        out[f"ResourceFlavor/{flavor['metadata']['name']}"] = flavor["metadata"]["uid"]
    for w in workloads_:
        for obj in kube_admin.list(
            "KueueWorkload", ns, label_selector=f"kueue.x-k8s.io/job-uid={w.k8s_uid}"
        ):
            out[f"Workload/{w.name}"] = obj["metadata"]["uid"]
        for pod in kube_admin.list("Pod", ns, label_selector=f"gpu-portal.io/workload={w.pk}"):
            out[f"Pod/{pod['metadata']['name']}"] = pod["metadata"]["uid"]
    return out


def admitted_at(kube_admin, w) -> str | None:
    (obj,) = kube_admin.list(
        "KueueWorkload", w.namespace, label_selector=f"kueue.x-k8s.io/job-uid={w.k8s_uid}"
    )
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Admitted" and c["status"] == "True":
            return c["lastTransitionTime"]
    return None


def test_an_install_made_by_the_previous_release_upgrades_with_nothing_lost_or_made_again(
    kube,
    kube_admin,
    tenant_namespaces,
    world,
    h100_mig,  # noqa: F811 - the fixture
    settings,
    previous_kueue,
):
    settings.PORTAL_INSTANCE = unique_slug("upg")  # a cohort of its own: nothing to borrow
    assert kueue_version() == previous_release.KUEUE_VERSION

    # --- what the previous release made (its portal wrote without a version check)
    kube.support = PreviousRelease()
    tenant = team(world, kube, tenant_namespaces, h100_mig, 1, prefix="upg")
    running = wait_state(kube, submit(kube, world, tenant, h100_mig, name="running"), "running")
    queued = wait_state(kube, submit(kube, world, tenant, h100_mig, name="queued"), "queued")
    assert queued.reason == "Pending"  # v0.17's one reason for all that waits
    before = snapshot(kube_admin, tenant, running, queued)
    admitted = admitted_at(kube_admin, running)
    assert admitted and len(before) >= 12, before

    # --- the upgrade. The new portal first, as a Helm upgrade of the chart alone would: it
    # refuses to write to Kueue v0.17, and changes nothing there
    kube.support = support.SupportCheck(kube._support_facts)
    refused = reconcile_tenant(kube, tenant.pk)
    assert (refused.status, refused.writes) == ("failed", 0)
    assert "Kueue is older than 0.18" in refused.error
    # then Kueue's new CRDs, webhooks and controller, and the portal's reconcile goes through
    cluster.up()
    assert kueue_version() == build.KUEUE_VERSION
    wait_for(  # a refused cluster is read again within support.REFUSED_TTL_S
        "the portal seeing the new Kueue",
        lambda: kube.support.verdict().supported,
        timeout=support.REFUSED_TTL_S + 10,
    )
    run = reconcile_tenant(kube, tenant.pk)
    assert (run.status, run.writes, run.changes, run.drift) == ("succeeded", 0, [], [])

    # nothing made again, nothing lost
    assert snapshot(kube_admin, tenant, running, queued) == before
    assert admitted_at(kube_admin, running) == admitted  # the same admission, not a new one
    assert wait_state(kube, running, "running").state == "running"
    # the queued one now waits in the new Kueue's words, and runs once there is room
    waiting = said(kube, queued, "WaitingForQuota")
    assert waiting.state == "queued"
    workloads.cancel_workload(actor=world.admin, workload=running)
    workload_sync.delete_from_cluster(kube, running.pk)  # the task the cancel queues
    wait_for(
        "the queued job admitted by the new Kueue",
        lambda: admitted_at(kube_admin, queued),
        timeout=60,
    )
    assert wait_state(kube, queued, "running").state == "running"
