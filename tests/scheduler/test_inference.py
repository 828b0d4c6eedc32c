"""Inference services, pure and through the API (issue 33, item 2): ports, the Service, probes,
a rollout that never exceeds the replicas, the replicas that hold quota, the page's reading of
an HPA, the local metrics adapter's answers, and bad input as a 400 that says what to change.
The cluster side is test_inference_cluster.py."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from core.errors import InvalidInput
from localcluster import metrics_adapter
from scheduler.workloads.kinds import serving
from scheduler.workloads.kinds.manifests import render_deployment, render_service
from scheduler.workloads.kinds.scaling import scaling_view
from scheduler.workloads.kinds.serving import Probe, ServicePort
from scheduler.workloads.models import Workload
from scheduler.workloads.pages.forms import initial_from
from tenants.models import AuditEvent
from tests.portal.api.conftest import session
from tests.scheduler.test_workloads import SPEC, granted, submit

__all__ = ["granted"]  # the fixture, shared with test_workloads

SERVICE = replace(
    SPEC,
    kind="deployment",
    ports=(ServicePort("http", 8080), ServicePort("metrics", 9090)),
    probes={"readiness": Probe("/ready", 8080), "liveness": Probe("/healthz", 8080)},
)


def test_a_service_deployment_has_ports_probes_and_a_rollout_without_surge():
    spec = render_deployment(SERVICE)["spec"]
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    main = spec["template"]["spec"]["containers"][0]
    assert main["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    assert main["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": 8080},
        "periodSeconds": 5,
        "failureThreshold": 3,
    }
    assert main["livenessProbe"] == {
        "httpGet": {"path": "/healthz", "port": 8080},
        "initialDelaySeconds": 30,
        "periodSeconds": 10,
        "failureThreshold": 6,
    }
    plain = render_deployment(replace(SPEC, kind="deployment"))["spec"]["template"]["spec"]
    assert not {"ports", "readinessProbe", "livenessProbe"} & set(plain["containers"][0])


def test_the_service_is_cluster_ip_over_the_workloads_pods_and_owned_by_its_deployment():
    assert render_service(SERVICE, owner_uid="u-1") == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "train-7-12",
            "namespace": "tenant-team-a",
            "labels": {
                "app.kubernetes.io/managed-by": "gpu-portal",
                "gpu-portal.io/instance": "test",
                "gpu-portal.io/tenant": "team-a",
                "gpu-portal.io/workload": "12",
            },
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train-7-12", "uid": "u-1"}
            ],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {"gpu-portal.io/workload": "12"},
            "ports": [
                {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
    with pytest.raises(ValueError, match="no port"):
        render_service(replace(SERVICE, ports=()))


def test_ports_and_probes_are_cleaned_with_names_and_port_names_resolved():
    ports = serving.check_ports([8080, {"name": "metrics", "port": 9090}], "deployment")
    assert ports == [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]
    probes = serving.check_probes(
        {"readiness": {"path": "/ready", "port": "http"}, "liveness": {"path": "/", "port": 9090}},
        "deployment",
        ports,
    )
    assert probes == {
        "readiness": {"path": "/ready", "port": 8080},
        "liveness": {"path": "/", "port": 9090},
    }
    assert serving.check_ports(None, "job") == [] and serving.check_probes({}, "job", []) == {}


@pytest.mark.parametrize(
    ("ports", "probes", "said"),
    [
        ([70000], None, "port 1 must be a whole number 1–65535, not 70000"),
        ([0], None, "1–65535"),
        ([{"name": "HTTP!", "port": 80}], None, "name 'HTTP!' must be 1–15 lower-case"),
        ([80, 80], None, "each port needs its own"),
        ([8080], {"readiness": {"path": "/ready"}}, "give probes.readiness.port: one of ['http']"),
        ([], {"liveness": {"path": "/healthz"}}, "give probes.liveness.port, e.g. 8080"),
        ([8080], {"readiness": {"path": "ready", "port": 8080}}, "must start with /"),
        ([8080], {"readiness": {"path": "/r", "port": "grpc"}}, "'grpc' names no port"),
        ([8080], {"startup": {"path": "/r", "port": 8080}}, "readiness and/or liveness"),
    ],
)
def test_bad_ports_and_probes_say_what_to_change(ports, probes, said):
    with pytest.raises(InvalidInput) as exc:
        cleaned = serving.check_ports(ports, "deployment")
        serving.check_probes(probes, "deployment", cleaned)
    assert said in exc.value.detail


def test_only_deployments_serve():
    with pytest.raises(InvalidInput, match="only deployments"):
        serving.check_ports([8080], "job")
    with pytest.raises(InvalidInput, match="only deployments"):
        serving.check_probes({"readiness": {"path": "/", "port": 1}}, "job", [])


def _pod(name, *, gated=False, phase="Running", deleting=False):
    pod = {"metadata": {"name": name}, "spec": {}, "status": {"phase": phase}}
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
        pod["status"]["phase"] = "Pending"
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


def test_the_pods_that_hold_quota_are_those_kueue_admitted_and_not_ending():
    pods = [
        _pod("a"),
        _pod("b", phase="Pending"),  # admitted, not placed yet: holds its quota
        _pod("c", gated=True),
        _pod("d", deleting=True),
        _pod("e", phase="Failed"),
    ]
    assert serving.replica_counts({"spec": {"replicas": 4}}, pods) == (2, 4)
    assert serving.replica_counts(None, []) == (0, None)


HPA = {
    "metadata": {"name": "serve-3"},
    "spec": {
        "minReplicas": 1,
        "maxReplicas": 4,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                    "target": {"type": "AverageValue", "averageValue": "50"},
                },
            }
        ],
    },
    "status": {
        "currentReplicas": 3,
        "desiredReplicas": 4,
        "lastScaleTime": "2026-01-01T10:00:05Z",
        "currentMetrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                    "current": {"averageValue": "90"},
                },
            }
        ],
        "conditions": [
            {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
            {
                "type": "ScalingLimited",
                "status": "True",
                "reason": "TooManyReplicas",
                "message": "the desired replica count is more than the maximum replica count",
            },
        ],  # fmt: skip
    },
}


def _event(reason, message, at, name="serve-3", kind="HorizontalPodAutoscaler"):
    return {
        "involvedObject": {"kind": kind, "name": name},
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "count": 1,
    }


def test_the_scaling_panel_reads_replicas_metrics_conditions_and_scale_events():
    events = [
        _event("SuccessfulRescale", "New size: 2; reason: pods metric above target", "T1"),
        _event("SuccessfulRescale", "New size: 4; reason: pods metric above target", "T2"),
        _event("SuccessfulRescale", "someone else's", "T3", name="other"),
        _event("Scheduled", "a pod's", "T4", kind="Pod"),
    ]
    view = scaling_view(HPA, events)
    assert (view.current, view.desired, view.min_replicas, view.max_replicas) == (3, 4, 1, 4)
    assert [(m.name, m.target, m.current) for m in view.metrics] == [
        ("DCGM_FI_DEV_GPU_UTIL", "50", "90")
    ]
    assert [(c.kind, c.ok, c.reason) for c in view.conditions] == [
        ("AbleToScale", True, "ReadyForNewScale"),
        ("ScalingLimited", True, "TooManyReplicas"),
    ]
    assert [e.message[:11] for e in view.events] == ["New size: 4", "New size: 2"]
    fresh = scaling_view({"metadata": {"name": "x"}, "spec": HPA["spec"]}, [])
    assert (fresh.current, fresh.metrics[0].current, fresh.events) == (None, "", [])


def test_an_autoscaler_without_a_metrics_api_is_said_in_words_not_only_raw():
    no_api = {
        "type": "ScalingActive",
        "status": "False",
        "reason": "FailedGetPodsMetric",
        "message": "the HPA was unable to compute the replica count: unable to get metric "
        "DCGM_FI_DEV_GPU_UTIL: no custom metrics API (custom.metrics.k8s.io) registered",
    }
    hpa = {**HPA, "status": {**HPA["status"], "conditions": [no_api]}}
    view = scaling_view(hpa, [])
    assert view.said.startswith("The autoscaler cannot read DCGM_FI_DEV_GPU_UTIL")
    assert "keeps 3 replicas" in view.said
    assert view.conditions[0].message == no_api["message"]  # the raw words stay beside
    assert scaling_view(HPA, []).said == ""  # a working autoscaler needs no words


# --- the local metrics adapter -----------------------------------------------------------------


class Answering(metrics_adapter.MetricsAdapter):
    """The adapter with Prometheus answered from a dict (what is asked is kept)."""

    def __init__(self, values):
        super().__init__("http://prometheus", ["DCGM_FI_DEV_GPU_UTIL"], self._pods)
        self.values = values
        self.asked = []

    def _pods(self, namespace, selector):
        return ["serve-1", "serve-2"] if selector == "gpu-portal.io/workload=3" else []

    def query(self, metric, namespace, pods):
        self.asked.append(metrics_adapter.promql(metric, namespace, pods))
        return {p: v for p, v in self.values.items() if p in pods}


def test_the_adapter_serves_prometheus_adapters_default_rule_as_a_metric_value_list():
    adapter = Answering({"serve-1": 90.0, "serve-2": 12.5})
    base = "/apis/custom.metrics.k8s.io/v1beta2"
    code, body = adapter.answer(base, "")
    assert code == 200
    assert body["resources"][0]["name"] == "pods/DCGM_FI_DEV_GPU_UTIL"
    code, body = adapter.answer(
        f"{base}/namespaces/team-a/pods/*/DCGM_FI_DEV_GPU_UTIL",
        "labelSelector=gpu-portal.io%2Fworkload%3D3",
    )
    assert code == 200
    assert adapter.asked == [
        'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{namespace="team-a",pod=~"serve-1|serve-2"})'
    ]
    assert [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [
        ("serve-1", "90"),
        ("serve-2", "12500m"),
    ]
    assert adapter.answer(f"{base}/namespaces/team-a/pods/*/other_metric", "")[0] == 404
    assert adapter.answer(f"{base}/namespaces/team-a/pods/gone/DCGM_FI_DEV_GPU_UTIL", "")[0] == 404
    assert adapter.answer("/apis", "")[0] == 404  # the aggregator falls back to the group list
    with pytest.raises(ValueError, match="not a DNS name"):
        metrics_adapter.promql("m", "team-a", ['x"}) or vector(1'])


def test_the_adapters_registration_goes_through_an_external_name_service():
    service, api = metrics_adapter.registration(8443, "Q0E=")
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    assert api["metadata"]["name"] == "v1beta2.custom.metrics.k8s.io"
    assert api["spec"]["service"] == {
        "namespace": "kube-system",
        "name": "gpu-portal-metrics-adapter",
        "port": 8443,
    }
    stamp = metrics_adapter.metric_value_list("m", "ns", {}, datetime(2026, 1, 1, tzinfo=UTC))
    assert stamp["kind"] == "MetricValueList" and stamp["items"] == []


# --- through the service and the API ----------------------------------------------------------


@pytest.mark.django_db
def test_a_service_is_submitted_with_its_ports_and_probes_and_audited(granted):
    w = submit(
        granted,
        kind="deployment",
        ports=[8080],
        probes={"readiness": {"path": "/ready", "port": "http"}},
    )
    assert w.ports == [{"name": "http", "port": 8080}]
    assert w.probes == {"readiness": {"path": "/ready", "port": 8080}}
    audit = AuditEvent.objects.get(verb="workload.submitted", object_id=str(w.pk))
    assert audit.after["ports"] == w.ports and audit.after["probes"] == w.probes


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"ports": [{"name": "http", "port": 70000}]}, "port 1 must be a whole number 1–65535"),
        (
            {"ports": [8080], "probes": {"readiness": {"path": "/ready"}}},
            "probes.readiness has a path but no port: give probes.readiness.port",
        ),
        (
            {"autoscaling": {"min_replicas": 3, "max_replicas": 2, "target_gpu_util": 50}},
            "max_replicas (2) is below min_replicas (3): raise max_replicas to at least 3",
        ),
    ],
)
def test_bad_service_input_is_a_400_that_says_what_to_change(granted, changes, said):
    body = {
        "tenant": "team-a",
        "name": "serve",
        "kind": "deployment",
        "image": "vllm/vllm-openai:v0.6.3",
        "resources": {granted.rc.slug: 1},
        "priority": "gpu-low",
        **changes,
    }
    answer = session(granted.member).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 400, answer.data
    assert said in answer.data["detail"]
    created = session(granted.member).post(
        "/api/v1/workloads/",
        {**body, "ports": [8080], "probes": {}, "autoscaling": None},
        format="json",
    )
    assert created.status_code == 201, created.data
    assert created.data["ports"] == [{"name": "http", "port": 8080}]


@pytest.mark.django_db
def test_the_page_shows_the_service_and_says_why_its_scaling_is_not_there_yet(granted, client):
    w = submit(
        granted,
        kind="deployment",
        ports=[8080],
        probes={"readiness": {"path": "/ready", "port": 8080}},
        autoscaling={"min_replicas": 1, "max_replicas": 4, "target_gpu_util": 50},
    )
    client.force_login(granted.member)
    page = client.get(reverse("scheduler:workload_detail", args=[w.pk])).content.decode()
    assert "1–4 replicas as its autoscaler decides" in page
    assert "<code>http</code> 8080" in page and "GET /ready" in page
    assert reverse("scheduler:workload_scaling", args=[w.pk]) in page
    panel = client.get(reverse("scheduler:workload_scaling", args=[w.pk]))
    assert panel.status_code == 200
    assert "is not on the cluster yet" in panel.content.decode()
    fixed = submit(granted, name="fixed", kind="deployment")
    answer = client.get(reverse("scheduler:workload_scaling", args=[fixed.pk]))
    assert "has a fixed number of replicas" in answer.content.decode()


def _form(client, tenant, rc, **overrides):
    data = {
        "name": "serve",
        "kind": "deployment",
        "image": "vllm/vllm-openai:v0.6.3",
        "resource_class": rc.slug,
        "units": 1,
        "priority": "gpu-low",
        "replicas": 1,
        "backoff_limit": 0,
        **overrides,
    }
    url = reverse("scheduler:workload_create", args=[tenant.slug])
    return client.post(url, data, follow=True)


@pytest.mark.django_db
def test_the_form_submits_a_service_and_shows_bad_ports_and_probes_at_their_fields(granted, client):
    client.force_login(granted.member)
    bad = _form(client, granted.tenant, granted.rc, port=70000)
    assert "port 1 must be a whole number 1–65535, not 70000" in bad.content.decode()
    no_port = _form(client, granted.tenant, granted.rc, readiness_path="/ready")
    assert "probes.readiness has a path but no port" in no_port.content.decode()
    assert not Workload.objects.filter(name="serve").exists()
    _form(client, granted.tenant, granted.rc, port=8080, readiness_path="/ready")
    w = Workload.objects.get(name="serve")
    assert (w.ports, w.probes) == (
        [{"name": "http", "port": 8080}],
        {"readiness": {"path": "/ready", "port": 8080}},
    )
    again = initial_from(w)
    assert (again["port"], again["readiness_path"], again["liveness_path"]) == (8080, "/ready", "")
