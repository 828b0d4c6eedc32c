"""Which clusters the portal serves (issue 44, item 4): the verdict on a cluster's versions (pure),
the local cluster judged as it is (Kubernetes 1.36, Kueue 0.19, read as the chart's account),
and an old cluster refused: a stand-in API server that answers like Kubernetes 1.34 with Kueue
0.17's CRD, to which the portal writes nothing while it says what to upgrade."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse

from scheduler.cluster import kube as kube_module
from scheduler.cluster import support
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.models import ReconcileRun
from scheduler.cluster.reconcile.runs import reconcile_tenant
from scheduler.cluster.support import UnsupportedCluster, judge


def crd(*, served: tuple[str, ...] = ("v1beta1", "v1beta2"), fields=("concurrentAdmissionPolicy",)):
    """A ClusterQueue CRD as Kueue publishes it, cut to what the verdict reads: v0.18 and later
    have spec.concurrentAdmissionPolicy, v0.17 has not."""
    properties = {f: {"type": "object"} for f in ("cohortName", *fields)}
    spec = {"type": "object", "properties": properties}
    return {
        "metadata": {"name": "clusterqueues.kueue.x-k8s.io"},
        "spec": {
            "versions": [
                {
                    "name": name,
                    "served": True,
                    "storage": name == served[-1],
                    "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}},
                }
                for name in served
            ]
        },
    }


KUEUE_017 = crd(fields=())


# --- the verdict (pure) ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1.35.0", "v1.36.3", "v1.36.0-rc.1+abc"])
def test_supported_versions_are_served_without_a_word(version):
    verdict = judge(version, crd())
    assert verdict.supported and verdict.warnings == ()
    assert verdict.kueue == "0.18 or newer"


@pytest.mark.parametrize("version", ["v1.32.4", "v1.34.2"])
def test_kubernetes_below_the_floor_is_refused_with_what_to_upgrade(version):
    verdict = judge(version, crd())
    assert not verdict.supported
    assert verdict.refusal == (
        f"Kubernetes {version} is older than 1.35: upgrade the cluster to Kubernetes 1.35 or "
        "newer (tested: v1.36.3)."
    )


def test_kueue_0_17_is_refused_by_what_its_crd_lacks():
    verdict = judge("v1.36.3", KUEUE_017)
    assert verdict.kueue == "older than 0.18" and "upgrade Kueue to v0.19.2" in verdict.refusal


def test_a_kueue_without_v1beta2_or_none_at_all_is_refused():
    assert "does not serve v1beta2" in judge("v1.36.3", crd(served=("v1beta1",))).refusal
    missing = judge("v1.36.3", None)
    assert missing.kueue == "not installed" and missing.refusal.startswith("Kueue is not installed")


def test_both_too_old_says_both():
    refusal = judge("v1.34.2", KUEUE_017).refusal
    assert "Kubernetes v1.34.2" in refusal and "Kueue is older than 0.18" in refusal


def test_what_the_portal_cannot_tell_is_a_warning_not_a_refusal():
    newer = judge("v1.37.2", crd())
    assert newer.supported and "newer than the portal is tested on" in newer.warnings[0]
    unreadable = judge("v1.36.3", None, crd_readable=False)
    assert unreadable.supported and unreadable.kueue == "unknown"
    assert "may not read the CRD" in unreadable.warnings[0]
    odd = judge("something", crd())
    assert odd.supported and "cannot be read" in odd.warnings[0]


# --- the local cluster as it is ---------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.django_db
def test_the_local_cluster_is_judged_supported_as_the_charts_account(kube):
    """The chart's ClusterRole lets the portal read the CRD: no warning, the exact version."""
    verdict = kube.support.verdict(fresh=True)
    assert (verdict.kubernetes, verdict.kueue) == ("v1.36.3", "0.18 or newer")
    assert verdict.supported and verdict.warnings == ()
    assert support.remembered() == verdict.as_dict()


# --- an old cluster: a stand-in API server ------------------------------------------------------


class _OldCluster(BaseHTTPRequestHandler):
    """Answers /version as Kubernetes 1.34.2 and the ClusterQueue CRD as Kueue 0.17 publishes
    it; anything else gets 404 and is recorded, so a test sees every request the portal made."""

    requests: list[tuple[str, str]]

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _any(self) -> None:
        self.requests.append((self.command, self.path.split("?")[0]))
        if self.command == "GET" and self.path == "/version":
            return self._answer(200, {"gitVersion": "v1.34.2", "major": "1", "minor": "34"})
        if self.command == "GET" and self.path.endswith(
            "/customresourcedefinitions/clusterqueues.kueue.x-k8s.io"
        ):
            return self._answer(200, KUEUE_017)
        return self._answer(404, {"kind": "Status", "code": 404, "message": "not here"})

    do_GET = do_PATCH = do_POST = do_DELETE = do_PUT = _any

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def old_cluster(tmp_path, settings):
    handler = type("Handler", (_OldCluster,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # any free port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "old-kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "old", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}
                ],
                "users": [{"name": "portal", "user": {"token": "t"}}],
                "contexts": [{"name": "old", "context": {"cluster": "old", "user": "portal"}}],
                "current-context": "old",
            }
        )
    )
    settings.KUBECONFIG = str(kubeconfig)
    kube_module.reset_gateway()
    yield handler.requests
    kube_module.reset_gateway()
    server.shutdown()
    server.server_close()


@pytest.mark.django_db
def test_an_old_cluster_is_refused_and_nothing_is_written_to_it(old_cluster, world, client):
    gateway = KubeGateway.configured()
    with pytest.raises(UnsupportedCluster, match="upgrade the cluster to Kubernetes 1.35"):
        gateway.apply({"kind": "Namespace", "metadata": {"name": "x"}})
    with pytest.raises(UnsupportedCluster):
        gateway.delete("Namespace", "x")
    with pytest.raises(UnsupportedCluster):
        gateway.evict("p", "x")

    # the reconciler records the refusal and writes nothing
    run = reconcile_tenant(kube_module.gateway(), world.tenant.pk)
    assert run.status == ReconcileRun.Status.FAILED
    assert "Kubernetes v1.34.2 is older than 1.35" in run.error
    assert "Kueue is older than 0.18" in run.error
    assert {method for method, _ in old_cluster} == {"GET"}
    assert {path for _, path in old_cluster} == {
        "/version",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterqueues.kueue.x-k8s.io",
    }

    # /readyz says what to upgrade
    ready = client.get(reverse("readyz"))
    assert ready.status_code == 503
    assert ready.json()["checks"]["cluster"].startswith(
        "unsupported: Kubernetes v1.34.2 is older than 1.35"
    )

    # the console: the platform team reads what to upgrade, a member that changes are paused
    client.force_login(world.admin)
    page = client.get(reverse("home")).content.decode()
    assert "The portal is not changing the cluster." in page and "upgrade Kueue" in page
    client.force_login(world.member)
    page = client.get(reverse("home")).content.decode()
    assert "Changes to the cluster are paused" in page
    assert "The portal is not changing the cluster." not in page
