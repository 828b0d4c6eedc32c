"""The generic access test, run for every endpoint: anonymous 401, wrong tenant 404, wrong
scope 403, expired or revoked token 401, right caller 2xx."""

import pytest
from rest_framework.test import APIClient

from tests.portal.api.conftest import bearer, session

pytestmark = pytest.mark.django_db

# name -> (list url, detail url from the ApiWorld, a valid creating body or None)
ENDPOINTS = {
    "tenants": ("/api/v1/tenants/", lambda a: f"/api/v1/tenants/{a.world.tenant.slug}/"),
    "members": ("/api/v1/members/", lambda a: f"/api/v1/members/{a.membership.pk}/"),
    "capacity-requests": (
        "/api/v1/capacity-requests/",
        lambda a: f"/api/v1/capacity-requests/{a.request.pk}/",
    ),
    "grants": ("/api/v1/grants/", lambda a: f"/api/v1/grants/{a.grant.pk}/"),
    "workloads": ("/api/v1/workloads/", lambda a: f"/api/v1/workloads/{a.workload.pk}/"),
    "tokens": ("/api/v1/tokens/", lambda a: f"/api/v1/tokens/{a.token.pk}/"),
    "audit-events": ("/api/v1/audit-events/", lambda a: f"/api/v1/audit-events/{a.audit.pk}/"),
}
GLOBAL = {
    "resource-classes": (
        "/api/v1/resource-classes/",
        lambda a: f"/api/v1/resource-classes/{a.world.rc.slug}/",
    )
}
ALL = {**ENDPOINTS, **GLOBAL}

# Creating calls and the scope a token needs for them (None: never by token).
CREATES = {
    "/api/v1/workloads/": "submit",
    "/api/v1/capacity-requests/": "request",
    "/api/v1/tenants/": "approve",
    "/api/v1/members/": None,
    "/api/v1/tokens/": None,
}


@pytest.mark.parametrize("name", sorted(ALL))
def test_anonymous_gets_401_with_bearer_challenge(api, name):
    list_url, detail = ALL[name]
    for url in (list_url, detail(api)):
        response = APIClient().get(url)
        assert response.status_code == 401, url
        assert response.data["code"] == "not_authenticated"
        assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("name", sorted(ENDPOINTS))
def test_another_tenant_gets_404_and_an_empty_list(api, name):
    list_url, detail = ENDPOINTS[name]
    for client in (session(api.world.outsider), bearer(api.raw["outsider"])):
        response = client.get(detail(api))
        assert response.status_code == 404, detail(api)
        assert response.data["code"] == "not_found"
        listed = client.get(list_url)
        assert listed.status_code == 200
        hidden = detail(api).rstrip("/").rsplit("/", 1)[1]
        assert hidden not in {str(r.get("slug", r.get("id"))) for r in listed.data["results"]}


@pytest.mark.parametrize("name", sorted(ALL))
def test_right_caller_gets_2xx_by_session_and_by_read_token(api, name):
    list_url, detail = ALL[name]
    for client in (session(api.world.member), bearer(api.raw["read"])):
        listed = client.get(list_url)
        assert listed.status_code == 200
        assert listed.data["count"] >= 1
        shown = client.get(detail(api))
        assert shown.status_code == 200, shown.data


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("which", ["expired", "revoked", "nonsense"])
def test_expired_revoked_or_unknown_token_gets_401(api, name, which):
    list_url, _ = ALL[name]
    raw = api.raw.get(which, "gpp_not-a-real-token")
    response = bearer(raw).get(list_url)
    assert response.status_code == 401
    assert response.data["code"] in ("authentication_failed", "not_authenticated")


@pytest.mark.parametrize("url", sorted(CREATES))
def test_a_token_without_the_scope_gets_403(api, url):
    response = bearer(api.raw["read"]).post(url, {}, format="json")
    assert response.status_code == 403
    assert response.data["code"] == "permission_denied"
    assert response.data["detail"]


def test_a_token_with_the_scope_may_submit(api, world):
    body = {
        "tenant": "team-a",
        "name": "tok-job",
        "kind": "job",
        "image": "busybox:1.36",
        "resources": {world.rc.slug: 1},
        "priority": "gpu-low",
    }
    response = bearer(api.raw["all"]).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.data
    assert response.data["state"] == "pending"
    assert response.data["namespace"].endswith("team-a")
    # and the same body for another tenant is a 404, not a 403
    response = bearer(api.raw["all"]).post(
        "/api/v1/workloads/", {**body, "tenant": "team-b"}, format="json"
    )
    assert response.status_code == 404


def test_last_used_at_is_recorded(api):
    assert api.token.last_used_at is None
    bearer(api.raw["read"]).get("/api/v1/tenants/")
    api.token.refresh_from_db()
    assert api.token.last_used_at is not None
