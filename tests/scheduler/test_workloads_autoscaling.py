"""Elastic scaling of inference deployments: the pure HorizontalPodAutoscaler, admission at min
replicas with quota held for the pods Kueue admitted, and the API and its schema. The cluster
side is in test_workloads_cluster.py and test_inference_cluster.py."""

from dataclasses import replace
from decimal import Decimal

import pytest

from core.errors import InvalidInput, QuotaExceeded
from scheduler.workloads.kinds import from_row
from scheduler.workloads.kinds.manifests import render_deployment, render_hpa
from scheduler.workloads.kinds.pod_template import AutoscalingSpec
from tenants import selectors as tenant_selectors
from tenants.models import AuditEvent
from tenants.services import grants as grant_services
from tests.portal.api.conftest import session
from tests.scheduler.test_workloads import SPEC, submit

SCALED = replace(
    SPEC,
    kind="deployment",
    replicas=2,
    autoscaling=AutoscalingSpec(
        min_replicas=2,
        max_replicas=5,
        target_gpu_util=70,
        target_latency_ms=250,
        gpu_util_metric="DCGM_FI_DEV_GPU_UTIL",
        latency_metric="http_request_duration_seconds_p95",
    ),
)
LABELS = {
    "app.kubernetes.io/managed-by": "gpu-portal",
    "gpu-portal.io/instance": "test",
    "gpu-portal.io/tenant": "team-a",
    "gpu-portal.io/workload": "12",
}


def test_the_hpa_scales_the_deployment_on_pod_metrics_with_the_workloads_labels():
    assert render_hpa(SCALED, owner_uid="u-1") == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "train-7-12",
            "namespace": "tenant-team-a",
            "labels": LABELS,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train-7-12", "uid": "u-1"}
            ],
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "train-7-12"},
            "minReplicas": 2,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                        "target": {"type": "AverageValue", "averageValue": "70"},
                    },
                },
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "http_request_duration_seconds_p95"},
                        "target": {"type": "AverageValue", "averageValue": "250m"},
                    },
                },
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "selectPolicy": "Max",
                    "policies": [
                        {"type": "Percent", "value": 100, "periodSeconds": 15},
                        {"type": "Pods", "value": 4, "periodSeconds": 15},
                    ],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                },
            },
        },
    }
    # The Deployment starts at the minimum; the HPA takes it from there.
    assert render_deployment(SCALED)["spec"]["replicas"] == 2


def test_one_target_gives_one_metric_and_no_owner_without_a_uid():
    spec = replace(SCALED, autoscaling=replace(SCALED.autoscaling, target_gpu_util=None))
    hpa = render_hpa(spec)
    assert "ownerReferences" not in hpa["metadata"]
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [
        "http_request_duration_seconds_p95"
    ]
    with pytest.raises(ValueError, match="does not autoscale"):
        render_hpa(SPEC)


@pytest.mark.parametrize(
    ("per_s", "quantity"),
    [(Decimal(5), "5"), (Decimal("5.000"), "5"), (Decimal("0.5"), "500m"),
     (Decimal("2.25"), "2250m"), (Decimal("0.001"), "1m"), (Decimal(100_000), "100000")],
)  # fmt: skip
def test_a_request_rate_target_is_a_pods_metric_averaged_per_replica(per_s, quantity):
    scaling = AutoscalingSpec(min_replicas=1, max_replicas=3, target_requests_per_s=per_s)
    (metric,) = render_hpa(replace(SCALED, autoscaling=scaling))["spec"]["metrics"]
    # AverageValue: the HPA sums the pods' rates and wants sum / target replicas
    assert metric == {
        "type": "Pods",
        "pods": {
            "metric": {"name": "requests_per_second"},
            "target": {"type": "AverageValue", "averageValue": quantity},
        },
    }


def test_all_three_targets_give_three_metrics_the_hpa_takes_the_largest_of():
    scaling = replace(
        SCALED.autoscaling, target_requests_per_s=Decimal(4), request_rate_metric="rps"
    )
    metrics = render_hpa(replace(SCALED, autoscaling=scaling))["spec"]["metrics"]
    named = [(m["pods"]["metric"]["name"], m["pods"]["target"]["averageValue"]) for m in metrics]
    assert named == [
        ("DCGM_FI_DEV_GPU_UTIL", "70"),
        ("http_request_duration_seconds_p95", "250m"),
        ("rps", "4"),
    ]


@pytest.mark.django_db
def test_spec_for_takes_the_request_rate_and_its_metric_name_from_settings(granted, settings):
    settings.AUTOSCALING_REQUEST_RATE_METRIC = "http_requests_per_second"
    w = submit(
        granted,
        kind="deployment",
        autoscaling={"min_replicas": 1, "max_replicas": 3, "target_requests_per_s": 2.5},
    )
    w.refresh_from_db()
    assert w.target_requests_per_s == Decimal("2.5")
    scaling = from_row.spec_for(w).autoscaling
    assert (scaling.target_requests_per_s, scaling.request_rate_metric) == (
        Decimal("2.5"),
        "http_requests_per_second",
    )
    hpa = render_hpa(from_row.spec_for(w))
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "2500m"
    assert w.autoscaling["target_requests_per_s"] == 2.5  # a number in JSON
    audit = AuditEvent.objects.filter(verb="workload.submitted", object_id=str(w.pk)).get()
    assert audit.after["autoscaling"]["target_requests_per_s"] == 2.5


@pytest.mark.django_db
def test_spec_for_takes_the_metric_names_from_settings(granted, settings):
    settings.AUTOSCALING_GPU_UTIL_METRIC = "gpu_util_custom"
    w = submit(
        granted,
        kind="deployment",
        autoscaling={"min_replicas": 1, "max_replicas": 3, "target_gpu_util": 60},
    )
    spec = from_row.spec_for(w)
    assert spec.autoscaling == AutoscalingSpec(
        min_replicas=1,
        max_replicas=3,
        target_gpu_util=60,
        target_latency_ms=None,
        gpu_util_metric="gpu_util_custom",
        latency_metric=settings.AUTOSCALING_LATENCY_METRIC,
    )


# --- admission --------------------------------------------------------------------------------


@pytest.fixture
def granted(world):
    grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4
    )
    return world


@pytest.mark.django_db
def test_admission_checks_min_replicas_and_quota_follows_the_admitted_pods(granted):
    world = granted
    submit(world, name="one")  # 1 of 4 in use
    with pytest.raises(QuotaExceeded) as exc:
        submit(
            world,
            name="serve",
            kind="deployment",
            autoscaling={"min_replicas": 5, "max_replicas": 6, "target_gpu_util": 70},
        )
    assert exc.value.field == "autoscaling"
    assert "5 pods at min replicas" in exc.value.detail
    assert (  # issue 49, 4: the one unit
        "needs 5 × 3g.40gb (= 15 slices), the grant is 12 slices; "
        "ask for 1 × 3g.40gb (= 3 slices) more"
    ) in exc.value.detail

    # a max beyond the grant is taken: the replicas past it wait in the team's queue
    w = submit(
        world,
        name="serve",
        kind="deployment",
        autoscaling={"min_replicas": 1, "max_replicas": 5, "target_latency_ms": 200},
    )
    assert (w.replicas, w.max_replicas, w.target_gpu_util, w.target_latency_ms) == (1, 5, None, 200)
    assert w.units_held() == {world.rc.slug: 1}  # its minimum until the cluster is seen

    def free() -> int:
        lines = tenant_selectors.quota_lines(world.tenant)
        return {line.resource_class.slug: line for line in lines}[world.rc.slug].free

    assert free() == 2  # 1 + 1, not 1 + 5
    w.held_replicas, w.desired_replicas = 3, 5  # as the sync saw it: 3 admitted, 2 waiting
    w.save()
    assert w.units_held() == {world.rc.slug: 3}
    assert free() == 0
    audit = AuditEvent.objects.filter(verb="workload.submitted", object_id=str(w.pk)).get()
    assert audit.after["autoscaling"]["max_replicas"] == 5


@pytest.mark.django_db
def test_min_replicas_defaults_to_replicas(granted):
    w = submit(
        granted,
        kind="deployment",
        replicas=2,
        autoscaling={"max_replicas": 3, "target_gpu_util": 50},
    )
    assert w.autoscaling == {
        "min_replicas": 2,
        "max_replicas": 3,
        "target_gpu_util": 50,
        "target_latency_ms": None,
        "target_requests_per_s": None,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "job", "autoscaling": {"max_replicas": 2, "target_gpu_util": 50}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2}}, "autoscaling"),
        (
            {"autoscaling": {"min_replicas": 3, "max_replicas": 2, "target_gpu_util": 5}},
            "autoscaling",
        ),
        ({"autoscaling": {"max_replicas": 65, "target_gpu_util": 50}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_gpu_util": 101}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_latency_ms": 0}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_gpu_util": 50, "cpu": 1}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": 0}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": -5}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": "5"}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": True}}, "autoscaling"),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": 100_001}}, "autoscaling"),
        (
            {"autoscaling": {"max_replicas": 2, "target_requests_per_s": float("nan")}},
            "autoscaling",
        ),
        ({"autoscaling": {"max_replicas": 2, "target_requests_per_s": 0.0004}}, "autoscaling"),
        ({"autoscaling": "yes"}, "autoscaling"),
        (
            {
                "replicas": 2,
                "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_gpu_util": 5},
            },
            "replicas",
        ),
    ],
)
def test_bad_autoscaling_is_refused_with_the_field(granted, changes, field):
    with pytest.raises(InvalidInput) as exc:
        submit(granted, **{"kind": "deployment", **changes})
    assert exc.value.field == field


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("per_s", "said"),
    [
        (0, "target_requests_per_s must be a number of requests per second per replica from "
            "0.001 to 100000, e.g. 5 or 0.5, not 0"),
        ("fast", "not 'fast'"),
        (1.2345, "target_requests_per_s 1.2345 has more than 3 decimals: round it to 1.234"),
    ],
)  # fmt: skip
def test_a_bad_request_rate_target_says_what_to_give(granted, per_s, said):
    with pytest.raises(InvalidInput) as exc:
        submit(
            granted,
            kind="deployment",
            autoscaling={"max_replicas": 2, "target_requests_per_s": per_s},
        )
    assert said in exc.value.detail and exc.value.field == "autoscaling"


@pytest.mark.django_db
def test_with_no_target_the_refusal_names_all_three(granted):
    with pytest.raises(InvalidInput, match="target_latency_ms and/or target_requests_per_s"):
        submit(granted, kind="deployment", autoscaling={"max_replicas": 2})


# --- API -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_takes_and_shows_autoscaling(granted):
    client = session(granted.member)
    body = {
        "tenant": "team-a",
        "name": "serve",
        "kind": "deployment",
        "image": "vllm/vllm-openai:v0.6.3",
        "resources": {granted.rc.slug: 1},
        "priority": "gpu-low",
        "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_gpu_util": 70},
    }
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.data
    assert created.data["autoscaling"] == {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_gpu_util": 70,
        "target_latency_ms": None,
        "target_requests_per_s": None,
    }
    too_big = client.post(
        "/api/v1/workloads/",
        {
            **body,
            "name": "serve-2",
            "autoscaling": {"min_replicas": 5, "max_replicas": 6, "target_gpu_util": 70},
        },
        format="json",
    )
    assert too_big.status_code == 409
    assert too_big.data["code"] == "quota_exceeded"
    assert "ask for 1 × 3g.40gb (= 3 slices) more" in too_big.data["detail"]
    no_target = client.post(
        "/api/v1/workloads/", {**body, "autoscaling": {"max_replicas": 2}}, format="json"
    )
    assert no_target.status_code == 400
    assert "autoscaling" in no_target.data["errors"]
    fixed = client.get("/api/v1/workloads/?name=serve&kind=deployment").data["results"][0]
    assert fixed["autoscaling"]["max_replicas"] == 3


@pytest.mark.django_db
def test_the_api_takes_a_request_rate_target_and_refuses_a_bad_one_with_a_400(granted):
    client = session(granted.member)
    body = {
        "tenant": "team-a",
        "name": "echo",
        "kind": "deployment",
        "image": "vllm/vllm-openai:v0.6.3",
        "resources": {granted.rc.slug: 1},
        "priority": "gpu-low",
        "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_requests_per_s": 2.5},
    }
    created = client.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.data
    assert created.data["autoscaling"]["target_requests_per_s"] == 2.5
    shown = client.get(f"/api/v1/workloads/{created.data['id']}/").data
    assert shown["autoscaling"]["target_requests_per_s"] == 2.5

    def refused(per_s) -> str:
        scaling = {"max_replicas": 3, "target_requests_per_s": per_s}
        answer = client.post(
            "/api/v1/workloads/", {**body, "name": "echo-2", "autoscaling": scaling}, format="json"
        )
        assert answer.status_code == 400, answer.data
        return str(answer.data)

    assert "target_requests_per_s" in refused(0)  # the serializer's bound, on its field
    assert "target_requests_per_s" in refused("fast")
    assert "round it to 0.333" in refused(0.3333)  # the service's rule


@pytest.mark.django_db
def test_the_schema_documents_autoscaling_with_an_example(granted):
    schema = session(granted.member).get("/api/schema/?format=json").json()
    request = schema["components"]["schemas"]["AutoscalingRequest"]
    assert set(request["properties"]) == {
        "min_replicas",
        "max_replicas",
        "target_gpu_util",
        "target_latency_ms",
        "target_requests_per_s",
    }
    examples = schema["paths"]["/api/v1/workloads/"]["post"]["requestBody"]["content"][
        "application/json"
    ]["examples"]
    assert any("autoscaling" in e["value"] for e in examples.values())
