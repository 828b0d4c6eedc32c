"""A notebook opened end to end (issue 51, item 5): the chart installed as pods on the real node
with its workspace proxy, a Jupyter workspace running there, and Chromium that knows the portal
and the workspace hosts only by the Services' addresses (a gateway would hold them in a real
cluster). Its owner opens it in one click and reaches its API and a kernel's WebSocket; a
teammate without a share and another team's member are refused; the server logs each request
it receives, and none carries a portal cookie, even one planted on the workspace's host; asked
around the proxy without its secret, the server refuses.

The workspace host is under `ws.localhost`, which Chromium counts a secure context, so the
proxy's `__Host-` cookie is kept over plain HTTP as it would be over TLS behind the gateway.

Its own lane of `make test` (marker `pods`: scripts/test.sh)."""

import json
import os
import re

import pytest
from kubernetes import client
from playwright.sync_api import sync_playwright

from localcluster import fleet, images, node_addons, portal_account, realnode
from tests.browsers import CHROMIUM, CHROMIUM_ARGS
from tests.deploy.chart_pods import ON_REAL_NODE, helm, in_pod, values, web_pod
from tests.realnode.probes import fetch_from_pod
from tests.scheduler.cluster_helpers import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.pods]

PORTAL = "portal.test"
DOMAIN = "ws.localhost"
PASSWORD = "e2e-Workspace-7"  # noqa: S105 (the test's own users)
TEAM, OTHER, NAME = "nb-team", "nb-other", "nb"
DEMO = images.demo_python_ref()
STORAGE_CLASS = "real-node-homes"

# Written into the home before the server starts (~/.jupyter, as a member could): every request
# Jupyter receives, logged with the names of its cookies and its Authorization scheme.
SERVER_CONFIG = """
import json

def _received(handler):
    request = handler.request
    print("RECEIVED " + json.dumps({
        "uri": request.uri,
        "status": handler.get_status(),
        "cookies": sorted(request.cookies),
        "authorization": request.headers.get("Authorization", "").split(" ")[0],
    }), flush=True)

c.ServerApp.tornado_settings = {"log_function": _received}
"""

SETUP = """
import json, time
from decimal import Decimal
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from catalog.models import Pool, ResourceClass
from scheduler.cluster.kube import gateway
from scheduler.cluster.reconcile.runs import TenantBusy, reconcile_cluster_objects
from scheduler.cluster.reconcile.runs import reconcile_tenant
from tenants.services.grants import grant_quota
from tenants.services.tenants import add_member, create_tenant, update_tenant
from workspaces import services

users = get_user_model()
admin = users.objects.create_user("e2e-admin", password=PASSWORD, is_staff=True)
admin.groups.add(Group.objects.get_or_create(name=settings.PLATFORM_ADMIN_GROUP)[0])
for name in ("owner", "mate", "outsider"):
    users.objects.create_user(name, password=PASSWORD)
rc = ResourceClass.objects.create(
    slug="b200-180gb", gpu_model="B200-180GB", kind="whole", profile="",
    resource_name="nvidia.com/gpu", gpu_fraction=1, memory_gb=180, price_per_hour=Decimal(2),
)
Pool.objects.create(resource_class=rc, capacity=GPUS, borrowing_limit=0)
kube = gateway()
reconcile_cluster_objects(kube)
team = create_tenant(actor=admin, slug=TEAM, name=TEAM, allowed_priority_classes=["gpu-low"])
update_tenant(actor=admin, tenant=team, gpu_ceiling=Decimal(64))
add_member(actor=admin, tenant=team, username="owner", role="member")
add_member(actor=admin, tenant=team, username="mate", role="member")
grant_quota(actor=admin, tenant=team, resource_class=rc, amount=1)
other = create_tenant(actor=admin, slug=OTHER, name=OTHER)
add_member(actor=admin, tenant=other, username="outsider", role="owner")
# the chart's worker reconciles each change too: the namespace is there once either run is
for attempt in range(120):
    try:
        reconcile_tenant(kube, team.pk)
        break
    except TenantBusy:
        time.sleep(1)
team.refresh_from_db()
# from here the chart's worker alone applies the workspace's objects and creates its run
ws = services.open_workspace(
    actor=users.objects.get(username="owner"), tenant=team, name=NAME, kind="jupyter",
    image=DEMO, resource_class=rc.slug, time_limit_h="1",
)
print("WORKSPACE", json.dumps({"id": ws.pk, "namespace": team.namespace}))
"""

# From the owner's page on the workspace's host: a kernel started through the proxy and its
# channels' WebSocket opened (what a notebook's cells run over).
KERNEL = """
async (base) => {
  const json = {"Content-Type": "application/json"};
  const started = await fetch(base + "api/kernels", {method: "POST", body: "{}", headers: json});
  if (started.status !== 201) return "kernel " + started.status;
  const kernel = await started.json();
  const url = "ws://" + location.host + base + "api/kernels/" + kernel.id + "/channels";
  return await new Promise((done) => {
    const socket = new WebSocket(url);
    socket.onopen = () => { socket.close(); done("open"); };
    socket.onerror = () => done("error");
    setTimeout(() => done("timeout"), 20000);
  });
}
"""


def home_volume(core: client.CoreV1Api, namespace: str) -> str:
    """The workspace's home as a directory of the real node's (no provisioner here), bound to
    its claim, with the server's logging config already in it."""
    home = realnode.NODE_DIR / "volumes" / f"home-{namespace}"
    config = home / ".jupyter"
    config.mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.py").write_text(SERVER_CONFIG)
    for path in (home, config, config / "jupyter_server_config.py"):
        os.chown(path, 1000, 1000)
    name = f"home-{namespace}"
    core.create_persistent_volume(
        {
            "metadata": {"name": name, "labels": {"gpu-portal.local/test": "true"}},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(home), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": f"ws-{NAME}-home"},
            },
        }
    )
    return name


def sign_in(browser, portal: str, username: str):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{portal}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert "/accounts/login/" not in page.url, f"{username} not signed in: {page.content()[:500]}"
    return context, page


def server_log(core: client.CoreV1Api, namespace: str) -> list[dict]:
    (pod,) = core.list_namespaced_pod(namespace, label_selector="gpu-portal.io/workspace").items
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    lines = [line for line in log.splitlines() if line.startswith("RECEIVED ")]
    return [json.loads(line.split(" ", 1)[1]) for line in lines]


def test_a_notebook_opens_for_its_owner_alone_through_the_charts_proxy_in_chromium(
    kube_cluster, release, tmp_path
):
    name, namespace = release
    api = kube_cluster.api_client
    core = client.CoreV1Api(api)
    node_addons.advertise_gpus(api, "B200-180GB", 2, "all-disabled")
    team_namespace = f"{namespace}-{TEAM}"
    volume = home_volume(core, team_namespace)
    try:
        helm("install", name, str(portal_account.CHART), "-n", namespace, "--create-namespace",
             "--wait", "--timeout=6m", *values(
                 namespace,
                 baseUrl=f"http://{PORTAL}",
                 workspaces={"domain": DOMAIN, "proxy": {"replicas": 1}},
                 gpuNodes={"tolerations": [*fleet.gpu_tolerations(), ON_REAL_NODE]},
                 extraConfig={"WORKSPACE_STORAGE_CLASS": STORAGE_CLASS},
             ), home=tmp_path)  # fmt: skip
        given = dict(PASSWORD=PASSWORD, GPUS=2, TEAM=TEAM, OTHER=OTHER, NAME=NAME, DEMO=DEMO)
        setup = "".join(f"{k} = {v!r}\n" for k, v in given.items()) + SETUP
        out = in_pod(api, namespace, web_pod(core, namespace),
                     ["python", "manage.py", "shell", "-c", setup])  # fmt: skip
        assert "WORKSPACE" in out, out[-3000:]
        made = json.loads(out.split("WORKSPACE", 1)[1].strip().splitlines()[0])
        ws, team = made["id"], made["namespace"]
        assert team == team_namespace
        opened(kube_cluster, core, name, namespace, ws, team)
    finally:
        core.delete_persistent_volume(volume)
        node_addons.withdraw_gpus(api)


def opened(kube_cluster, core, release: str, namespace: str, ws: int, team: str) -> None:
    web = core.read_namespaced_service(f"{release}-gpu-portal", namespace)
    proxy = next(
        s
        for s in core.list_namespaced_service(namespace).items
        if s.metadata.labels.get("app.kubernetes.io/component") == "workspace-proxy"
    )
    rules = f"MAP {PORTAL} {web.spec.cluster_ip}, MAP *.{DOMAIN} {proxy.spec.cluster_ip}"
    portal, host = f"http://{PORTAL}", f"http://w{ws}.{DOMAIN}"
    base = f"/ws/{team}/{NAME}/"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                *(a for a in CHROMIUM_ARGS if not a.startswith("--headless")),
                f"--host-resolver-rules={rules}",
            ],
        )
        try:
            owner, page = sign_in(browser, portal, "owner")

            def open_link():
                page.goto(f"{portal}/workspaces/{ws}/")
                link = page.get_by_role("link", name=f"Open {NAME}")
                return link if link.count() else None

            link = wait_for("the workspace running on its page", open_link, timeout=240)
            # a cookie of the portal's names on the workspace's host (as a sibling host could
            # set one): the proxy must not pass it on either
            owner.add_cookies(
                [{"name": n, "value": "planted", "url": host} for n in ("sessionid", "csrftoken")]
            )
            link.click()  # one click
            page.wait_for_url(re.compile(re.escape(f"{host}{base}") + "lab"), timeout=90_000)
            page.wait_for_function("document.title.includes('JupyterLab')", timeout=60_000)
            status = page.evaluate("async (u) => (await fetch(u)).status", f"{base}api/status")
            assert status == 200
            assert page.evaluate(KERNEL, base) == "open"
            assert any(c["name"] == "sessionid" for c in owner.cookies(portal))

            for person in ("mate", "outsider"):
                context, other = sign_in(browser, portal, person)
                refused = other.goto(f"{portal}/workspaces/{ws}/open/")
                assert refused.status in (403, 404), (person, refused.status)
                around = other.goto(f"{host}{base}lab")  # sent back to the portal, refused
                assert around.status in (403, 404) and other.url.startswith(portal), (
                    person, around.status, other.url,
                )  # fmt: skip
                context.close()
            owner.close()
        finally:
            browser.close()

    received = server_log(core, team)
    assert any(r["uri"].startswith(f"{base}api/kernels") for r in received), received[-5:]
    portal_cookies = {"sessionid", "csrftoken", "__Host-gpu-portal-ws"}
    leaked = [r for r in received if portal_cookies & set(r["cookies"])]
    assert not leaked, leaked[:3]
    assert {r["authorization"] for r in received} <= {"token", ""}, received[-5:]
    cookies = sorted({c for r in received for c in r["cookies"]})
    print(f"the server received {len(received)} requests; cookie names among them: {cookies}")

    # around the proxy, from the platform's namespace (which the team's policy admits): the
    # server itself refuses a request without its secret
    url = f"http://ws-{NAME}.{team}.svc:8888{base}api/status"
    answer = fetch_from_pod(kube_cluster.core, namespace, url, {})
    assert answer.split(" ", 1)[0] in ("401", "403"), answer
