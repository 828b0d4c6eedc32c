"""The Helm chart (deploy/helm/gpu-portal), rendered by the helm that localcluster builds and
read as data: what a cluster would be given, not how the templates spell it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from catalog import kueue_integrations
from localcluster import build

HELM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm"
CHART = HELM_DIR / "gpu-portal"
RELEASE, NAMESPACE = "gp", "gpu-portal"
FULLNAME = f"{RELEASE}-gpu-portal"

# What the portal exports (web /metrics and the workers' metrics port), and Prometheus's `up`.
PORTAL_METRICS = {
    "gpu_portal_reconcile_failures",
    "gpu_portal_reconcile_lag_seconds",
    "gpu_portal_celery_queue_depth",
    "gpu_portal_pending_approvals",
    "gpu_portal_pending_approval_oldest_age_seconds",
    "gpu_portal_grants_expiring_soon",
    "gpu_portal_task_runs_total",
    "gpu_portal_task_failures_total",
    "gpu_portal_task_duration_seconds",
    "gpu_portal_http_request_duration_seconds",
    "up",
}
SECRET_ENV = {
    "WORKSPACE_PROXY_TOKEN",
    "SECRET_KEY",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CACHE_URL",
    "OIDC_RP_CLIENT_SECRET",
    "POSTGRES_PASSWORD",
    "REDIS_PASSWORD",
}
QUEUES = {"default", "reconcile", "metering", "notify", "follow"}


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.ensure_built(verbose=False)["helm"]


def template(helm: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def render(helm: Path, values_set: str, *args: str) -> dict[tuple[str, str], dict]:
    """The objects of one render by (kind, name)."""
    done = template(helm, "-f", str(HELM_DIR / "check-values" / f"{values_set}.yaml"), *args)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    objects = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert len(objects) == len(docs), "two objects of one kind share a name"
    return objects


@pytest.fixture(scope="module")
def required(helm):
    return render(helm, "required")


@pytest.fixture(scope="module")
def trial(helm):
    return render(helm, "trial")


@pytest.fixture(scope="module")
def full(helm):
    return render(helm, "full")


@pytest.fixture(scope="module")
def every_render(required, trial, full):
    return {"required": required, "trial": trial, "full": full}


def pod_specs(objects) -> dict[str, dict]:
    """Every pod template's spec, by its owner's kind/name."""
    return {
        f"{kind}/{name}": obj["spec"]["template"]["spec"]
        for (kind, name), obj in objects.items()
        if kind in ("Deployment", "StatefulSet", "Job")
    }


def containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def metric_names(expr: str) -> set[str]:
    """Identifiers of an expression that are portal metrics (histograms by their series)."""
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {re.sub(r"_(bucket|count|sum)$", "", w) for w in words} & PORTAL_METRICS


# --- one beat, probes, security ------------------------------------------------------------------


def test_exactly_one_beat_that_stops_before_the_next_starts(every_render):
    for objects in every_render.values():
        beat = objects[("Deployment", f"{FULLNAME}-beat")]
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}
        (container,) = beat["spec"]["template"]["spec"]["containers"]
        assert container["command"][:4] == ["celery", "-A", "portal", "beat"]
        # the schedule file on the writable /tmp, the root filesystem being read-only
        assert "/tmp/celerybeat-schedule" in container["command"]  # noqa: S108 - the pod's path
        beats = [
            o
            for o in objects.values()
            if "beat" in " ".join(str(c) for c in _commands(o))
            and o["kind"] in ("Deployment", "StatefulSet")
        ]
        assert beats == [beat]


def _commands(obj: dict) -> list[str]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return [word for c in spec.get("containers", []) for word in c.get("command", [])]


def test_web_runs_gunicorn_with_liveness_on_healthz_and_readiness_on_readyz(required):
    web = required[("Deployment", f"{FULLNAME}-web")]
    (container,) = web["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "gunicorn",
        "-c",
        "deploy/gunicorn.conf.py",
        "portal.wsgi:application",
    ]
    assert container["workingDir"] == "/app"
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # the probes come with the pod's IP as Host, which the portal answers on those paths only
    # (tests/portal/test_metrics.py): every other path keeps the configured hosts
    env = env_of(container)
    assert env["ALLOWED_HOSTS"]["value"] == "gpu-portal.example.com"
    assert "POD_IP" not in env
    assert (env["WEB_WORKERS"]["value"], env["WEB_THREADS"]["value"]) == ("2", "4")


def test_every_container_runs_as_non_root_on_a_read_only_root(every_render):
    for render_name, objects in every_render.items():
        for owner, spec in pod_specs(objects).items():
            where = f"{render_name}: {owner}"
            pod_sc = spec["securityContext"]
            assert pod_sc["runAsNonRoot"] is True, where
            assert pod_sc["runAsUser"] > 0, where
            assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            for c in containers(spec):
                sc = c["securityContext"]
                assert sc["readOnlyRootFilesystem"] is True, (where, c["name"])
                assert sc["allowPrivilegeEscalation"] is False, (where, c["name"])
                assert sc["capabilities"]["drop"] == ["ALL"], (where, c["name"])
                assert not sc.get("privileged"), (where, c["name"])
                assert c["resources"].get("requests"), (where, c["name"])


def test_portal_pods_run_as_the_images_user_with_a_writable_tmp(required):
    for owner, spec in pod_specs(required).items():
        assert spec["securityContext"]["runAsUser"] == 10001, owner
        assert spec["securityContext"]["fsGroup"] == 10001, owner
        assert {"name": "tmp", "emptyDir": {}} in spec["volumes"], owner
        for c in containers(spec):
            mount = {"name": "tmp", "mountPath": "/tmp"}  # noqa: S108 - the pod's emptyDir
            assert mount in c["volumeMounts"], (owner, c["name"])


def test_only_pods_that_talk_to_the_cluster_get_a_token(required):
    account = required[("ServiceAccount", FULLNAME)]
    assert account["automountServiceAccountToken"] is False  # pods opt in
    specs = pod_specs(required)
    for component in ("web", "beat", "worker-all", "worker-follow"):
        spec = specs[f"Deployment/{FULLNAME}-{component}"]
        assert spec["automountServiceAccountToken"] is True, component
        assert spec["serviceAccountName"] == FULLNAME, component
    migrate = specs[f"Job/{FULLNAME}-migrate"]
    assert migrate["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in migrate  # the chart's is not there before the hooks


def test_the_cluster_is_read_in_cluster_never_through_a_kubeconfig(every_render):
    for objects in every_render.values():
        for owner, spec in pod_specs(objects).items():
            for c in containers(spec):
                assert "KUBECONFIG" not in env_of(c), owner
                assert not any("kube" in m["mountPath"] for m in c.get("volumeMounts", []))
        config = objects[("ConfigMap", f"{FULLNAME}-config")]
        assert "KUBECONFIG" not in config["data"]


# --- migrations ----------------------------------------------------------------------------------


def test_migrations_run_as_a_hook_before_install_and_upgrade(required):
    job = required[("Job", f"{FULLNAME}-migrate")]
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {
        "before-hook-creation",
        "hook-succeeded",
    }
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # what migrate reads comes with the Job: the ConfigMap does not exist before the hooks
    # and what its system checks read: the workspaces' origin (portal.E020, issue 51)
    assert set(env_of(container)) == {
        "DJANGO_SETTINGS_MODULE",
        "SECRET_KEY",
        "DATABASE_URL",
        "PORTAL_BASE_URL",
        "WORKSPACE_DOMAIN",
        "PORTAL_HOST_COOKIES",
        "WORKSPACE_ALLOW_SAME_SITE",
        "SECURE_COOKIES",
    }


def test_every_portal_pod_waits_for_the_schema(every_render):
    for objects in every_render.values():
        for (kind, name), obj in objects.items():
            component = obj["metadata"]["labels"].get("app.kubernetes.io/component")
            if kind == "Deployment" and component in ("web", "worker", "beat"):
                (init,) = obj["spec"]["template"]["spec"]["initContainers"]
                assert "migrate --check" in init["command"][-1], name


# --- secrets -------------------------------------------------------------------------------------


def test_secrets_come_from_secret_references_never_from_values(every_render):
    for render_name, objects in every_render.items():
        for owner, spec in pod_specs(objects).items():
            for c in containers(spec):
                for name, entry in env_of(c).items():
                    if name in SECRET_ENV:
                        assert set(entry) == {"name", "valueFrom"}, (render_name, owner, name)
                        assert entry["valueFrom"]["secretKeyRef"]["name"], (owner, name)
                    else:
                        assert "@" not in str(entry.get("value", "")), (owner, name)
        config = objects[("ConfigMap", f"{FULLNAME}-config")]
        assert not SECRET_ENV & set(config["data"]), render_name


def test_a_production_install_references_its_own_secrets_and_the_chart_makes_none(required, full):
    assert not [key for key in required if key[0] == "Secret"]
    web = required[("Deployment", f"{FULLNAME}-web")]
    env = env_of(web["spec"]["template"]["spec"]["containers"][0])
    refs = {name: env[name]["valueFrom"]["secretKeyRef"] for name in SECRET_ENV & set(env)}
    assert refs == {
        "SECRET_KEY": {"name": "gpu-portal-django", "key": "SECRET_KEY"},
        "DATABASE_URL": {"name": "gpu-portal-postgres", "key": "DATABASE_URL"},
        "CELERY_BROKER_URL": {"name": "gpu-portal-redis", "key": "CELERY_BROKER_URL"},
        "CACHE_URL": {"name": "gpu-portal-redis", "key": "CACHE_URL"},
        "WORKSPACE_PROXY_TOKEN": {"name": "gpu-portal-workspace-proxy", "key": "token"},
    }
    full_web = full[("Deployment", f"{FULLNAME}-web")]
    full_env = env_of(full_web["spec"]["template"]["spec"]["containers"][0])
    assert full_env["OIDC_RP_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpu-portal-oidc",
        "key": "OIDC_RP_CLIENT_SECRET",
    }
    assert full[("ConfigMap", f"{FULLNAME}-config")]["data"]["OIDC_RP_CLIENT_ID"] == "gpu-portal"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--set", "allowedHosts={a.example.com}", "--set", "externalDatabase.existingSecret=d"]
            + ["--set", "externalRedis.existingSecret=r"],
            "secretKey: set secretKey.existingSecret",
        ),
        (
            ["--set", "allowedHosts={a.example.com}", "--set", "secretKey.existingSecret=s"]
            + ["--set", "externalRedis.existingSecret=r"],
            "externalDatabase: set externalDatabase.existingSecret",
        ),
        (
            ["--set", "allowedHosts={a.example.com}", "--set", "secretKey.existingSecret=s"]
            + ["--set", "externalDatabase.existingSecret=d"],
            "externalRedis: set externalRedis.existingSecret",
        ),
        (["--set", "trial.enabled=true"], "allowedHosts: name the host(s)"),
        (
            ["-f", str(HELM_DIR / "check-values" / "required.yaml")]
            + ["--set", "workspaces.proxy.token.existingSecret="],
            "workspaces.proxy.token.existingSecret: the workspace proxy",
        ),
        (
            ["-f", str(HELM_DIR / "check-values" / "required.yaml")]
            + ["--set", "workspaces.httpRoute.enabled=true"],
            "workspaces.httpRoute.parentRefs: name the Gateway",
        ),
        (
            ["--set", "trial.enabled=true", "--set", "allowedHosts={a.example.com}"]
            + ["--set", "oidc.clientId=portal", "--set", "oidc.authorizationEndpoint=https://s/a"]
            + ["--set", "oidc.tokenEndpoint=https://s/t", "--set", "oidc.userEndpoint=https://s/u"],
            "oidc.clientSecret.existingSecret",
        ),
        (
            ["--set", "trial.enabled=true", "--set", "allowedHosts={a.example.com}"]
            + ["--set-json", 'workers=[{"name":"w","queues":["default","reconcile","metering"]}]'],
            'no worker consumes the queue "notify"',
        ),
        (
            ["--set", "trial.enabled=true", "--set", "allowedHosts={a.example.com}"]
            + ["--set", "metrics.serviceMonitor.enabled=true"],
            "the web's /metrics refuses Prometheus without a token",
        ),
    ],
    ids=[
        "secret-key",
        "database",
        "redis",
        "hosts",
        "proxy-token",
        "route-parent",
        "oidc-secret",
        "queue-without-worker",
        "scrape-without-token",
    ],
)
def test_a_missing_required_value_is_refused_saying_what_to_set(helm, args, says):
    done = template(helm, *args)
    assert done.returncode != 0
    assert says in done.stderr


# --- workspaces ----------------------------------------------------------------------------------


def test_workspaces_get_their_own_domain_behind_the_portals_proxy_and_a_gateway_route(
    required, trial, full
):
    """Issue 51, 4: the proxy (no cluster token, the web Service as its portal) and, where asked,
    a Gateway API route for the wildcard host; no nginx annotations anywhere."""
    name = f"{FULLNAME}-workspace-proxy"
    proxy = full[("Deployment", name)]["spec"]["template"]["spec"]
    assert proxy["automountServiceAccountToken"] is False
    (container,) = proxy["containers"]
    assert container["command"] == ["python", "-m", "workspaces.proxy"]
    env = env_of(container)
    assert env["WORKSPACE_DOMAIN"]["value"] == "ws.example-workspaces.net"
    assert env["WORKSPACE_PROXY_PORTAL_URL"]["value"] == f"http://{FULLNAME}.{NAMESPACE}.svc:80"
    assert container["readinessProbe"]["httpGet"]["path"] == "/_portal/healthz"
    assert full[("Service", name)]["spec"]["ports"][0]["targetPort"] == "http"
    route = full[("HTTPRoute", name)]["spec"]
    assert route["hostnames"] == ["*.ws.example-workspaces.net"]
    assert route["parentRefs"][0]["name"] == "platform-gateway"
    assert route["rules"][0]["backendRefs"] == [{"name": name, "port": 80}]
    assert ("HTTPRoute", name) not in required and ("Deployment", name) in required
    config = full[("ConfigMap", f"{FULLNAME}-config")]["data"]
    assert (config["WORKSPACE_DOMAIN"], config["WORKSPACE_ALLOW_SAME_SITE"]) == (
        "ws.example-workspaces.net",
        "false",
    )
    # a trial without a domain: no proxy, and the portal told it is a developer's install
    assert ("Deployment", name) not in trial
    trial_config = trial[("ConfigMap", f"{FULLNAME}-config")]["data"]
    assert trial_config["WORKSPACE_ALLOW_SAME_SITE"] == "true"
    for objects in (required, trial, full):
        assert "nginx.ingress.kubernetes.io/auth-url" not in yaml.safe_dump(list(objects.values()))


# --- workers -------------------------------------------------------------------------------------


def test_one_worker_deployment_per_entry_consuming_its_queues(full):
    workers = {
        obj["metadata"]["labels"]["gpu-portal/worker"]: obj
        for (kind, _), obj in full.items()
        if kind == "Deployment"
        and obj["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    }
    assert set(workers) == {"cluster", "background", "follow"}
    consumed = set()
    for name, expected_replicas, expected_concurrency in (
        ("cluster", 2, "2"),
        ("background", 1, "4"),
        ("follow", 1, "1"),
    ):
        deployment = workers[name]
        assert deployment["spec"]["replicas"] == expected_replicas
        (c,) = deployment["spec"]["template"]["spec"]["containers"]
        command = c["command"]
        assert command[:4] == ["celery", "-A", "portal", "worker"]
        assert command[command.index("--concurrency") + 1] == expected_concurrency
        consumed |= set(command[command.index("-Q") + 1].split(","))
        assert c["ports"] == [{"name": "metrics", "containerPort": 9808, "protocol": "TCP"}]
        assert env_of(c)["WORKER_METRICS_PORT"]["value"] == "9808"
    assert consumed == QUEUES


def test_the_default_workers_consume_every_queue_the_sync_in_one_process_of_its_own(required):
    def queues_and_concurrency(name):
        worker = required[("Deployment", f"{FULLNAME}-worker-{name}")]
        command = worker["spec"]["template"]["spec"]["containers"][0]["command"]
        return set(command[command.index("-Q") + 1].split(",")), (
            worker["spec"]["replicas"],
            command[command.index("--concurrency") + 1],
        )

    (everything, _), (follow, processes) = map(queues_and_concurrency, ("all", "follow"))
    assert everything | follow == QUEUES
    # each sync run takes on what the last one read of the cluster only in the same process
    assert (follow, processes) == ({"follow"}, (1, "1"))


# --- settings ------------------------------------------------------------------------------------


def test_settings_for_gpu_nodes_kueue_and_the_operator(full):
    data = full[("ConfigMap", f"{FULLNAME}-config")]["data"]
    assert data["DJANGO_SETTINGS_MODULE"] == "portal.settings.prod"
    assert json.loads(data["GPU_NODE_TOLERATIONS"]) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert json.loads(data["GPU_PRODUCT_LABELS"]) == {"H100-80GB": "NVIDIA-H100-PCIe"}
    assert data["GPU_OPERATOR_NAMESPACE"] == "gpu-operator"
    assert data["WORKLOAD_IMAGE_ALLOWLIST"] == "registry.example.com,docker.io/pytorch"
    # the ingress host gives the hosts, the trusted origin and the mails' address
    assert data["CSRF_TRUSTED_ORIGINS"] == "https://gpu-portal.example.com"
    assert data["PORTAL_BASE_URL"] == "https://gpu-portal.example.com"
    assert data["TRUSTED_PROXY_COUNT"] == "1"  # the ingress appends to X-Forwarded-For
    assert data["SECURE_SSL_REDIRECT"] == "true"
    assert data["PLATFORM_NAMESPACE"] == NAMESPACE
    # team pods may reach this release's web pods (and nothing else there): the labels the
    # portal renders into their NetworkPolicy select exactly those pods
    selector = dict(pair.split("=", 1) for pair in data["PLATFORM_WEB_POD_LABELS"].split(","))
    for kind, name in full:
        if kind == "Deployment":
            labels = full[(kind, name)]["spec"]["template"]["metadata"]["labels"]
            selected = selector.items() <= labels.items()
            assert selected == name.endswith("-web"), name
    assert data["PLATFORM_WEB_PORT"] == "8000"


def test_kueue_integrations_and_where_its_configuration_is_read(required):
    data = required[("ConfigMap", f"{FULLNAME}-config")]["data"]
    assert data["KUEUE_INTEGRATIONS"] == ",".join(kueue_integrations.DEFAULT)
    assert data["KUEUE_CONFIG_NAMESPACE"] == "kueue-system"
    assert data["KUEUE_CONFIG_MAP"] == "kueue-manager-config"


# Which Kueue runs (support.py) and whether it is 0.19, as a fleet needs (probes.py).
KUEUE_CRDS = ("clusterqueues.kueue.x-k8s.io", "multikueueconfigs.kueue.x-k8s.io")


def _crd_rule(objects) -> dict:
    (rule,) = [
        r
        for r in objects[("ClusterRole", FULLNAME)]["rules"]
        if r["resources"] == ["customresourcedefinitions"]
    ]
    return rule


def test_the_portal_reads_kueues_configuration_and_nothing_else_there(required):
    role = required[("Role", f"{FULLNAME}-kueue-config")]
    assert role["metadata"]["namespace"] == "kueue-system"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kueue-manager-config"],
            "verbs": ["get"],
        }
    ]
    binding = required[("RoleBinding", f"{FULLNAME}-kueue-config")]
    assert binding["metadata"]["namespace"] == "kueue-system"
    assert binding["roleRef"]["name"] == f"{FULLNAME}-kueue-config"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    # the default integrations are Kubernetes' own kinds: Kueue's two CRDs the probes read alone
    assert _crd_rule(required)["resourceNames"] == [*KUEUE_CRDS]
    assert _crd_rule(required)["verbs"] == ["get"]


def test_the_manager_may_write_multikueues_objects(required):
    """Issue 54: AdmissionCheck, MultiKueueConfig and MultiKueueCluster are the reconciler's on a
    fleet's manager (scheduler/cluster/served_kinds.py serves them)."""
    from scheduler.cluster import served_kinds

    rules = required[("ClusterRole", FULLNAME)]["rules"]
    (rule,) = [r for r in rules if "multikueueclusters" in r["resources"]]
    assert rule["apiGroups"] == ["kueue.x-k8s.io"]
    assert sorted(rule["resources"]) == sorted(
        served_kinds.KINDS[k].plural
        for k in ("AdmissionCheck", "MultiKueueConfig", "MultiKueueCluster")
    )
    assert rule["verbs"] == ["get", "list", "watch", "create", "update", "patch", "delete"]
    assert "resourceNames" not in rule


def test_a_manager_reads_kubeconfig_secrets_in_kueues_namespace_only(helm, required):
    # a single-cluster install: no Secret is read anywhere
    assert ("Role", f"{FULLNAME}-multikueue") not in required
    secrets = [
        r
        for kind, name in required
        if kind in ("ClusterRole", "Role")
        for r in required[(kind, name)]["rules"]
        if "secrets" in r["resources"]
    ]
    assert all({"get", "list", "watch"}.isdisjoint(r["verbs"]) for r in secrets)
    manager = render(helm, "required", "--set", "multikueue.enabled=true")
    role = manager[("Role", f"{FULLNAME}-multikueue")]
    assert role["metadata"]["namespace"] == "kueue-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "patch"]}
    ]
    binding = manager[("RoleBinding", f"{FULLNAME}-multikueue")]
    assert binding["metadata"]["namespace"] == "kueue-system"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    named = render(
        helm,
        "required",
        "--set",
        "multikueue.enabled=true",
        "--set",
        "multikueue.kubeconfigSecrets={east-kubeconfig,west-kubeconfig}",
        "--set",
        "kueue.configMap.namespace=kueue",
    )
    role = named[("Role", f"{FULLNAME}-multikueue")]
    assert role["metadata"]["namespace"] == "kueue"
    assert role["rules"][0]["resourceNames"] == ["east-kubeconfig", "west-kubeconfig"]
    # without Kueue there is no MultiKueue: neither the rules nor the Role
    bare = render(
        helm, "required", "--set", "kueue.enabled=false", "--set", "multikueue.enabled=true"
    )
    assert ("Role", f"{FULLNAME}-multikueue") not in bare


def test_the_crds_it_may_read_are_those_of_the_enabled_integrations(helm):
    every = list(kueue_integrations.FRAMEWORKS)
    objects = render(helm, "required", "--set", f"kueue.integrations={{{','.join(every)}}}")
    assert _crd_rule(objects)["resourceNames"] == [
        *KUEUE_CRDS,
        *(f.crd for f in kueue_integrations.optional(every)),
    ]
    objects = render(helm, "required", "--set", "kueue.integrations={batch/job,ray.io/rayjob}")
    assert _crd_rule(objects)["resourceNames"] == [*KUEUE_CRDS, "rayjobs.ray.io"]


def test_ingress_with_tls_and_an_autoscaled_web_that_keeps_one_pod_through_drains(full):
    ingress = full[("Ingress", FULLNAME)]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["gpu-portal.example.com"], "secretName": "gpu-portal-tls"}
    ]
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": FULLNAME, "port": {"name": "http"}}
    hpa = full[("HorizontalPodAutoscaler", f"{FULLNAME}-web")]
    assert hpa["spec"]["scaleTargetRef"]["name"] == f"{FULLNAME}-web"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert "replicas" not in full[("Deployment", f"{FULLNAME}-web")]["spec"]  # the HPA's
    pdb = full[("PodDisruptionBudget", f"{FULLNAME}-web")]
    assert pdb["spec"]["minAvailable"] == 1


# --- metrics and alerts --------------------------------------------------------------------------


def test_monitoring_objects_only_when_asked_for(required):
    kinds = {kind for kind, _ in required}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    assert ("ConfigMap", f"{FULLNAME}-dashboard") not in required


def test_service_monitor_scrapes_web_and_worker_metrics(full):
    monitor = full[("ServiceMonitor", FULLNAME)]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    endpoints = {(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]}
    assert endpoints == {("http", "/metrics"), ("metrics", "/metrics")}
    # the web's /metrics wants the token the web pods read from the same Secret
    web = next(e for e in monitor["spec"]["endpoints"] if e["port"] == "http")
    token = {"name": "gpu-portal-metrics", "key": "metrics-token"}
    assert web["authorization"] == {"type": "Bearer", "credentials": token}
    env = full[("Deployment", f"{FULLNAME}-web")]["spec"]["template"]["spec"]["containers"][0][
        "env"
    ]
    assert {"name": "METRICS_TOKEN", "valueFrom": {"secretKeyRef": token}} in env
    worker_service = full[("Service", f"{FULLNAME}-worker-metrics")]
    assert worker_service["spec"]["ports"][0]["targetPort"] == "metrics"
    selector = {e["key"]: e["values"] for e in monitor["spec"]["selector"]["matchExpressions"]}
    for service in (worker_service, full[("Service", FULLNAME)]):
        labels = service["metadata"]["labels"]
        assert all(labels[key] in values for key, values in selector.items())


def test_alerts_on_reconciles_workers_backlog_and_approvals(full):
    rule = full[("PrometheusRule", FULLNAME)]
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {
        "GpuPortalReconcileFailing",
        "GpuPortalWorkerDown",
        "GpuPortalQueueBacklog",
        "GpuPortalApprovalsWaiting",
    }
    assert metric_names(alerts["GpuPortalReconcileFailing"]["expr"]) == {
        "gpu_portal_reconcile_failures"
    }
    assert metric_names(alerts["GpuPortalWorkerDown"]["expr"]) == {"up"}
    assert f'job="{FULLNAME}-worker-metrics"' in alerts["GpuPortalWorkerDown"]["expr"]
    assert metric_names(alerts["GpuPortalQueueBacklog"]["expr"]) == {
        "gpu_portal_celery_queue_depth"
    }
    assert metric_names(alerts["GpuPortalApprovalsWaiting"]["expr"]) == {
        "gpu_portal_pending_approval_oldest_age_seconds"
    }
    for name, alert in alerts.items():
        assert f'namespace="{NAMESPACE}"' in alert["expr"], name  # this release's only
        assert alert["for"] and alert["annotations"]["summary"], name


def test_dashboard_is_json_over_the_portals_metrics(full):
    config_map = full[("ConfigMap", f"{FULLNAME}-dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["gpu-portal.json"])
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs and all(metric_names(expr) for expr in exprs)
    shown = set().union(*(metric_names(expr) for expr in exprs))
    assert shown == PORTAL_METRICS


# --- trial ---------------------------------------------------------------------------------------


def test_a_trial_runs_postgres_and_redis_in_the_release_and_points_the_portal_at_them(trial):
    postgres = trial[("StatefulSet", f"{FULLNAME}-postgresql")]
    (pg,) = postgres["spec"]["template"]["spec"]["containers"]
    assert pg["image"] == "postgres:16"
    (claim,) = postgres["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    redis = trial[("Deployment", f"{FULLNAME}-redis")]
    assert redis["spec"]["template"]["spec"]["containers"][0]["image"] == "redis:7"
    assert ("Service", f"{FULLNAME}-postgresql") in trial
    assert ("Service", f"{FULLNAME}-redis") in trial

    secret = trial[("Secret", f"{FULLNAME}-secrets")]
    urls = secret["stringData"]
    web = trial[("Deployment", f"{FULLNAME}-web")]
    env = env_of(web["spec"]["template"]["spec"]["containers"][0])
    for name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": f"{FULLNAME}-secrets",
            "key": name,
        }
    password = urls["POSTGRES_PASSWORD"]
    assert urls["DATABASE_URL"] == (
        f"postgres://gpu_portal:{password}@{FULLNAME}-postgresql:5432/gpu_portal"
    )
    assert urls["CELERY_BROKER_URL"].endswith(f"@{FULLNAME}-redis:6379/0")
    assert urls["CACHE_URL"].endswith(f"@{FULLNAME}-redis:6379/1")
    assert len(urls["SECRET_KEY"]) >= 50
    # the Secret exists before anything that reads it
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]


def test_a_trial_migrates_beside_its_database_not_before_it(trial):
    jobs = [obj for (kind, _), obj in trial.items() if kind == "Job"]
    (job,) = jobs
    # PostgreSQL is part of the release: a pre-install hook would wait for it forever
    assert "helm.sh/hook" not in (job["metadata"].get("annotations") or {})
    assert job["metadata"]["name"] == f"{FULLNAME}-migrate-1"  # one per revision
    data = trial[("ConfigMap", f"{FULLNAME}-config")]["data"]
    assert (data["SECURE_SSL_REDIRECT"], data["SECURE_HSTS_SECONDS"]) == ("false", "0")


# --- the chart's README --------------------------------------------------------------------------


def _value_paths(values: dict, prefix: str = "") -> set[str]:
    """Dotted paths of every leaf of values.yaml (a list or an empty map is a leaf)."""
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            paths |= _value_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_the_readme_documents_every_value_and_only_values():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text().split("## Values", 1)[1]
    rows = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    leaves = _value_paths(values)

    def documented(path: str) -> bool:  # a row may cover a whole map (web.resources)
        parts = path.split(".")
        return any(".".join(parts[:n]) in rows for n in range(1, len(parts) + 1))

    assert sorted(p for p in leaves if not documented(p)) == []
    assert sorted(r for r in rows if not any(p == r or p.startswith(f"{r}.") for p in leaves)) == []


# --- the API server takes every object -----------------------------------------------------------

# The Prometheus Operator's kinds and Gateway API's: the local cluster serves no such CRDs.
NOT_SERVED_LOCALLY = {"ServiceMonitor", "PrometheusRule", "HTTPRoute"}


@pytest.mark.cluster
@pytest.mark.parametrize("values_set", ["required", "trial", "full"])
def test_the_api_server_accepts_every_object_of_a_render(
    helm, kube_cluster, kube_namespace, values_set
):
    """A server-side dry run: field names, types and enums as the API server checks them (a
    template that renders a map where a string belongs parses as YAML, and fails only here)."""
    done = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--namespace", kube_namespace]
        + ["-f", str(HELM_DIR / "check-values" / f"{values_set}.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    in_release = [
        d
        for d in docs
        if d["kind"] not in NOT_SERVED_LOCALLY
        and d["metadata"].get("namespace", kube_namespace) == kube_namespace
    ]
    assert len(in_release) >= 10
    kubectl = build.ensure_built(verbose=False)["kubectl"]
    applied = subprocess.run(
        [str(kubectl), f"--kubeconfig={kube_cluster.kubeconfig}", "apply", "--dry-run=server"]
        + ["--namespace", kube_namespace, "-f", "-"],
        input=yaml.safe_dump_all(in_release),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == len(in_release)
