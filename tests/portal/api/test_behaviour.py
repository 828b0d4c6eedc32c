"""Idempotency, error format, query counts, throttling and the schema."""

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.models import IdempotencyRecord
from scheduler.cluster import kube
from scheduler.workloads import services as workloads
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.api.throttling import PerTokenThrottle
from tenants.models import AuditEvent
from tenants.services import grants as grant_services
from tenants.services import requests as request_services
from tests.portal.api.conftest import bearer, session
from tests.tenants.factories import MembershipFactory, TenantFactory

pytestmark = pytest.mark.django_db


def job(world, name="idem-1", **extra):
    return {
        "tenant": world.tenant.slug,
        "name": name,
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
        **extra,
    }


def test_same_key_and_body_replays_the_first_answer(api, world):
    client = bearer(api.raw["all"])
    first = client.post("/api/v1/workloads/", job(world), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = client.post("/api/v1/workloads/", job(world), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Workload.objects.filter(name="idem-1").count() == 1
    assert AuditEvent.objects.filter(verb="workload.submitted", object_id=str(first.data["id"]))


def test_same_key_with_another_body_is_409(api, world):
    client = bearer(api.raw["all"])
    first = client.post("/api/v1/workloads/", job(world), format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert first.status_code == 201 and first.data["name"] == "idem-1"  # the key is now taken
    other = client.post(
        "/api/v1/workloads/", job(world, "idem-2"), format="json", HTTP_IDEMPOTENCY_KEY="k2"
    )
    assert other.status_code == 409
    assert other.data["code"] == "idempotency_key_reused"
    assert not Workload.objects.filter(name="idem-2").exists()


def test_a_refused_create_is_not_remembered(api, world):
    client = bearer(api.raw["all"])
    body = job(world, resources={world.rc.slug: 99})
    refused = client.post("/api/v1/workloads/", body, format="json", HTTP_IDEMPOTENCY_KEY="k3")
    assert refused.status_code == 409
    assert not IdempotencyRecord.objects.filter(key="k3").exists()


def test_keys_are_per_user(api, world):
    body = job(world)
    mine = bearer(api.raw["all"])
    first = mine.post("/api/v1/workloads/", body, format="json", HTTP_IDEMPOTENCY_KEY="x")
    assert first.status_code == 201
    owner = session(world.owner).post(
        "/api/v1/workloads/", job(world, "idem-own"), format="json", HTTP_IDEMPOTENCY_KEY="x"
    )
    assert owner.status_code == 201


def test_more_than_the_grant_is_a_clear_409_with_what_to_ask_for(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", job(world, resources={world.rc.slug: 9}), format="json"
    )
    assert response.status_code == 409
    assert response.data["code"] == "quota_exceeded"
    # 4 x 3g granted, 12 compute slices (1 held by the fixture's workload: what fits the
    # grant would wait queued)
    assert (
        "A100-80GB: needs 9 × 3g.40gb (= 27 slices), the grant is 12 slices; "
        "ask for 5 × 3g.40gb (= 15 slices) more (a100-80gb-mig-3g.40gb)"
    ) in response.data["detail"]
    assert response.data["errors"] == {"resources": [response.data["detail"]]}


def test_field_errors_have_code_detail_and_errors(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", {"tenant": "team-a"}, format="json"
    )
    assert response.status_code == 400
    assert response.data["code"] == "invalid"
    assert {"name", "kind", "image", "resources", "priority"} <= set(response.data["errors"])


def test_a_priority_class_the_tenant_may_not_use_is_refused(api, world):
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", job(world, priority="gpu-critical"), format="json"
    )
    assert response.status_code == 400
    assert response.data["code"] == "priority_not_allowed"


def test_viewers_cannot_submit(api, world):
    response = session(world.viewer).post("/api/v1/workloads/", job(world), format="json")
    assert response.status_code == 403
    assert response.data["code"] == "forbidden"


def _more_of_everything(world, n):
    for i in range(n):
        tenant = TenantFactory(slug=f"extra-{i}")
        MembershipFactory(tenant=tenant, user=world.admin, role="owner")
        grant_services.grant_quota(
            actor=world.admin, tenant=tenant, resource_class=world.rc, amount=1
        )
        workloads.submit_workload(
            actor=world.admin,
            tenant=tenant,
            spec=workload_spec(
                name=f"w{i}",
                kind="deployment",
                image="busybox:1.36",
                resources={world.rc.slug: 1},
                priority="gpu-low",
            ),
        )
        request_services.submit_capacity_request(
            actor=world.admin,
            tenant=tenant,
            items={world.rc.slug: 1},
            ends_at=None,
            justification="more",
        )


LISTS = [
    "/api/v1/tenants/",
    "/api/v1/members/",
    "/api/v1/capacity-requests/",
    "/api/v1/grants/",
    "/api/v1/workloads/",
    "/api/v1/audit-events/",
    "/api/v1/resource-classes/",
    "/api/v1/tokens/",
]


@pytest.mark.parametrize("url", LISTS)
def test_list_endpoints_use_a_constant_number_of_queries(
    api, world, url, django_assert_num_queries
):
    client = session(world.admin)
    client.get(url)  # warm: session, content types
    with CaptureQueriesContext(connection) as few:
        small = client.get(url)
    _more_of_everything(world, 3)
    with django_assert_num_queries(len(few)):
        large = client.get(url)
    assert small.status_code == large.status_code == 200
    if url not in ("/api/v1/resource-classes/", "/api/v1/tokens/"):
        assert large.data["count"] > small.data["count"]


def test_throttled_per_token(api, monkeypatch):
    cache.clear()
    monkeypatch.setattr(PerTokenThrottle, "THROTTLE_RATES", {"per_token": "3/min"})
    client = bearer(api.raw["read"])
    codes = [client.get("/api/v1/tenants/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    assert bearer(api.raw["all"]).get("/api/v1/tenants/").status_code == 200  # its own budget
    cache.clear()


def test_schema_and_docs_are_served_without_a_cdn(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/v1/workloads/",
        "/api/v1/workloads/{id}/cancel/",
        "/api/v1/workloads/{id}/logs/",
        "/api/v1/capacity-requests/{id}/approve/",
        "/api/v1/tokens/",
        "/api/v1/resource-classes/",
        "/api/v1/audit-events/",
        "/api/v1/members/",
    ):
        assert path in paths
    assert "bearerAuth" in schema.json()["components"]["securitySchemes"]
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "cdn.jsdelivr" not in html and "unpkg" not in html
    assert "drf_spectacular_sidecar" in html


def test_cancel_by_token_then_again_is_409(api, world):
    client = bearer(api.raw["all"])
    url = f"/api/v1/workloads/{api.workload.pk}/cancel/"
    response = client.post(url, format="json")
    assert response.status_code == 200 and response.data["state"] == "cancelled"
    again = client.post(url, format="json")
    assert again.status_code == 409 and again.data["code"] == "invalid_transition"
    detail = client.get(f"/api/v1/workloads/{api.workload.pk}/")
    assert [e["reason"] for e in detail.data["events"]] == ["Submitted", "Cancelled"]
    # a read-only token may not cancel
    assert bearer(api.raw["read"]).post(url).status_code == 403


def test_resume_is_for_suspended_workloads_of_ones_own_team(api, world):
    url = f"/api/v1/workloads/{api.workload.pk}/resume/"
    response = bearer(api.raw["all"]).post(url, format="json")
    assert response.status_code == 409 and response.data["code"] == "invalid_transition"
    assert "only a suspended workload can be resumed" in response.data["detail"]
    assert bearer(api.raw["read"]).post(url).status_code == 403
    assert (
        "/api/v1/workloads/{id}/resume/"
        in bearer(api.raw["read"])
        .get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        .json()["paths"]
    )


def test_logs_before_the_cluster_has_it_are_a_409_not_a_500(api):
    response = bearer(api.raw["read"]).get(f"/api/v1/workloads/{api.workload.pk}/logs/")
    assert response.status_code == 409
    assert response.data["code"] == "logs_unavailable"


def test_logs_with_no_readable_kubeconfig_are_a_409_that_says_so(api, settings, tmp_path):
    """A portal whose KUBECONFIG names no readable file answers why, never a 500."""
    Workload.objects.filter(pk=api.workload.pk).update(cluster_created_at=timezone.now())
    settings.KUBECONFIG = str(tmp_path / "missing-kubeconfig")
    kube.reset_gateway()
    try:
        response = bearer(api.raw["read"]).get(f"/api/v1/workloads/{api.workload.pk}/logs/")
    finally:
        kube.reset_gateway()  # the next test gets the configured cluster's gateway again
    assert response.status_code == 409
    assert response.data["code"] == "logs_unavailable"
    assert "cannot read the kubeconfig" in response.data["detail"]


def test_tenant_shows_namespace_quota_in_use_and_free(api, world, settings):
    data = bearer(api.raw["read"]).get(f"/api/v1/tenants/{world.tenant.slug}/").data
    assert data["namespace"] == f"{settings.TENANT_NAMESPACE_PREFIX}team-a"
    assert data["quota"] == [
        {
            "resource_class": world.rc.slug,
            "granted": 4,
            "in_use": 1,
            "free": 3,
            # issue 49, 4: the numbers kept, what runs (its one workload is admitted, not
            # running yet) and the words added
            "running": 0,
            "summary": "4 × 3g.40gb (= 12 of 12 slices) granted; "
            "0 × 3g.40gb (= 0 of 12 slices) running (+ 1 admitted, not running yet); "
            "3 × 3g.40gb (= 9 of 12 slices) unused",
        }
    ]
    assert data["reconcile_status"] == "pending"
    rc = bearer(api.raw["read"]).get(f"/api/v1/resource-classes/{world.rc.slug}/").data
    assert (rc["capacity"], rc["granted"], rc["free"]) == (10, 4, 6)


@pytest.mark.django_db(transaction=True)
def test_two_identical_submits_racing_with_one_key_both_get_the_first_answer(api, world):
    """The second waits for the first to commit, then replays its answer; it is not refused
    with "already runs a workload named …" (issue 14)."""
    from tests.race import race

    raw = api.raw["all"]

    def post():
        response = bearer(raw).post(
            "/api/v1/workloads/", job(world, name="racer"), format="json",
            HTTP_IDEMPOTENCY_KEY="race-1",
        )  # fmt: skip
        return response.status_code, response.json(), response.get("Idempotent-Replayed")

    results = race([post, post, post])
    assert [status for status, _, _ in results] == [201, 201, 201], results
    assert len({body["id"] for _, body, _ in results}) == 1
    assert sorted(str(replayed) for _, _, replayed in results) == ["None", "true", "true"]
    assert Workload.objects.filter(name="racer").count() == 1
