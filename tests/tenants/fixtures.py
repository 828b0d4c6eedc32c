"""Shared fixtures: a small world of one pool, two tenants and people in every role."""

from dataclasses import dataclass

import pytest

from catalog.models import Pool, ResourceClass
from tenants.models import Membership, Tenant
from tests.tenants.factories import (
    MembershipFactory,
    PlatformAdminFactory,
    PoolFactory,
    ResourceClassFactory,
    TenantFactory,
    UserFactory,
)


@dataclass
class World:
    admin: object
    owner: object
    member: object
    viewer: object
    outsider: object
    tenant: Tenant
    other_tenant: Tenant
    rc: ResourceClass
    pool: Pool


@pytest.fixture
def world(db) -> World:
    tenant = TenantFactory(slug="team-a")
    other = TenantFactory(slug="team-b")
    rc = ResourceClassFactory(slug="a100-80gb-mig-3g.40gb")
    pool = PoolFactory(resource_class=rc, capacity=10)
    people = {}
    for role in (Membership.Role.OWNER, Membership.Role.MEMBER, Membership.Role.VIEWER):
        people[role] = MembershipFactory(
            tenant=tenant, role=role, user=UserFactory(username=role)
        ).user
    outsider = MembershipFactory(
        tenant=other, role=Membership.Role.OWNER, user=UserFactory(username="outsider")
    ).user
    return World(
        admin=PlatformAdminFactory(username="platform"),
        owner=people["owner"],
        member=people["member"],
        viewer=people["viewer"],
        outsider=outsider,
        tenant=tenant,
        other_tenant=other,
        rc=rc,
        pool=pool,
    )
