"""The chart installed with Helm 3 (the previous release's installer; v3.21.4, the Helm 3
approved here) and upgraded with Helm 4 (the checkout's, v4.3.2) on the local cluster (issue 44,
item 5): Helm 4 takes over the Helm 3 release, a changed value lands, nothing is made again.

Hooks are left out of both (`--no-hooks`): the migrations Job would never finish on a KWOK node,
where no process runs; the hook Job's own upgrade is the chart's `pre-upgrade` contract, proven
by `make chart`'s renders."""

import json
import os
import subprocess
import uuid

import pytest
import yaml

from localcluster import build, cluster, portal_account, previous_release

pytestmark = pytest.mark.cluster


def helm(binary, *args: str, home) -> str:
    env = dict(
        os.environ,
        KUBECONFIG=str(cluster.KUBECONFIG),
        # Helm's own files in the test's folder, not this machine's
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    done = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, f"{binary.name} {' '.join(args[:2])}: {done.stderr[-2000:]}"
    return done.stdout


def uids(manifest: str, namespace: str) -> dict[str, str]:
    """uid of each object of a release's manifest, as the cluster has it now (helm leaves the
    release's namespace out of the manifest; kubectl ignores it for cluster-wide kinds)."""
    out = {}
    for doc in yaml.safe_load_all(manifest):
        if not doc:
            continue
        name = doc["metadata"]["name"]
        where = doc["metadata"].get("namespace") or namespace
        got = portal_account.kubectl("get", doc["kind"], name, "-n", where, "-o=json")
        out[f"{doc['kind']}/{name}"] = json.loads(got)["metadata"]["uid"]
    return out


@pytest.fixture
def release(kube_cluster, tmp_path):
    name = f"upg-{uuid.uuid4().hex[:6]}"
    yield name, f"helm-{name}"
    # whatever the test left: the release (cluster-wide objects too), then its namespace
    helm4 = build.ensure_built(verbose=False)["helm"]
    helm(helm4, "uninstall", name, "-n", f"helm-{name}", "--ignore-not-found", home=tmp_path)
    portal_account.kubectl(
        "delete", "namespace", f"helm-{name}", "--ignore-not-found", "--wait=false"
    )


def test_a_release_installed_with_helm_3_is_upgraded_by_helm_4(release, tmp_path):
    helm3 = previous_release.ensure_built()["helm"]
    helm4 = build.ensure_built(verbose=False)["helm"]
    name, ns = release
    values = [
        "-f",
        str(portal_account.REQUIRED_VALUES),
        "--set",
        f"gpuOperator.namespace={ns}",  # the release's own, not the shared gpu-operator one
    ]
    chart = str(portal_account.CHART)
    helm(helm3, "install", name, chart, "-n", ns, "--create-namespace", "--no-hooks", *values,
         home=tmp_path)  # fmt: skip
    installed = helm(helm3, "get", "manifest", name, "-n", ns, home=tmp_path)
    before = uids(installed, ns)
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ConfigMap"} <= {
        key.split("/")[0] for key in before
    }, before

    helm(helm4, "upgrade", name, chart, "-n", ns, "--no-hooks", *values,
         "--set", "web.replicaCount=3", home=tmp_path)  # fmt: skip

    history = json.loads(helm(helm4, "history", name, "-n", ns, "-o", "json", home=tmp_path))
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "deployed")]
    upgraded = helm(helm4, "get", "manifest", name, "-n", ns, home=tmp_path)
    assert uids(upgraded, ns) == before  # the same objects, none made again
    web = [
        d
        for d in yaml.safe_load_all(upgraded)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-web")
    ]
    (deployment,) = web
    live = portal_account.kubectl("get", "deployment", deployment["metadata"]["name"], "-n", ns,
                                  "-o=jsonpath={.spec.replicas}")  # fmt: skip
    assert live == "3"  # the changed value landed
