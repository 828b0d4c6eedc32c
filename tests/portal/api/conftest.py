"""A populated world for API tests: one object of every kind in team-a, tokens of every kind."""

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler.workloads import services as workloads
from scheduler.workloads.models import Workload
from scheduler.workloads.submit.spec import workload_spec
from tenants.models import ApiToken, AuditEvent, CapacityRequest, Membership, QuotaGrant
from tenants.services import grants as grant_services
from tenants.services import requests as request_services
from tenants.services import tokens as token_services


@dataclass
class ApiWorld:
    world: object
    membership: Membership
    request: CapacityRequest
    grant: QuotaGrant
    workload: Workload
    token: ApiToken
    audit: AuditEvent
    raw: dict


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def session(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def api(world) -> ApiWorld:
    grant = grant_services.grant_quota(
        actor=world.admin, tenant=world.tenant, resource_class=world.rc, amount=4
    )
    request = request_services.submit_capacity_request(
        actor=world.member,
        tenant=world.tenant,
        items={world.rc.slug: 1},
        ends_at=timezone.now() + timedelta(days=3),
        justification="api tests",
    )
    workload = workloads.submit_workload(
        actor=world.member,
        tenant=world.tenant,
        spec=workload_spec(
            name="train-1",
            kind="job",
            image="pytorch/pytorch:2.4-cuda12.4",
            resources={world.rc.slug: 1},
            priority="gpu-low",
        ),
    )
    raw = {}
    tokens = {}
    for label, scopes in {
        "read": ["read"],
        "all": ["read", "request", "submit"],
    }.items():
        tokens[label], raw[label] = token_services.issue_token(
            actor=world.member, user=world.member, name=label, scopes=scopes
        )
    expired, raw["expired"] = token_services.issue_token(
        actor=world.member, user=world.member, name="old", scopes=["read", "submit"]
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    revoked, raw["revoked"] = token_services.issue_token(
        actor=world.member, user=world.member, name="gone", scopes=["read", "submit"]
    )
    token_services.revoke_token(actor=world.member, token=revoked)
    _, raw["outsider"] = token_services.issue_token(
        actor=world.outsider, user=world.outsider, name="other", scopes=["read", "submit"]
    )
    return ApiWorld(
        world=world,
        membership=Membership.objects.get(tenant=world.tenant, user=world.member),
        request=request,
        grant=grant,
        workload=workload,
        token=tokens["read"],
        audit=AuditEvent.objects.filter(tenant=world.tenant).first(),
        raw=raw,
    )
