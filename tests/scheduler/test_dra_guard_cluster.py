"""The guards on a team's DRA objects, on the local cluster as a member with the kubectl access
the portal binds (impersonated): the portal's ResourceClaimTemplates are not theirs to change or
delete (ownership guard), and a claim or template of their own that could spend GPU devices
Kueue does not charge is refused when it is made (queue guard, render/device_guard.py); a
one-device claim of a portal class, and a template of their own, are still accepted. The rules
as rendered: tests/scheduler/test_dra_guard.py."""

# ruff: noqa: F811 (fixtures imported from the modules that define them)
import pytest

from catalog import dra_quota
from core.errors import ClusterError
from scheduler.cluster.render.labels import MANAGED_BY, MANAGED_BY_LABEL
from tests.scheduler.cluster_helpers import (
    as_user,
    unique_slug,
    wait_for,
    wait_for_quota,
    wait_until_refused,
)
from tests.scheduler.test_dra_cluster import MODEL, ONE_G, dra_classes  # noqa: F401
from tests.scheduler.test_kueue_cluster import team

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

PROFILE = "1g.5gb"
ALL_DEVICES = "may not ask for every GPU device of a node"


def _claim(ns: str, name: str, **exactly) -> dict:
    """A member's ResourceClaim: the portal's one-device request for a 1g of the model, with
    `exactly` changed as given (None drops a field)."""
    spec = dra_quota.claim_template(MODEL, PROFILE, 1, namespace=ns)["spec"]["spec"]
    request = spec["devices"]["requests"][0]["exactly"]
    for field, value in exactly.items():
        if value is None:
            request.pop(field, None)
        else:
            request[field] = value
    return {
        "apiVersion": dra_quota.RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _template(ns: str, name: str, **exactly) -> dict:
    claim = _claim(ns, name, **exactly)
    return {
        "apiVersion": dra_quota.RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": claim["spec"]},
    }


def test_a_members_claims_spend_only_what_kueue_charges_and_the_portals_templates_stay_its(
    kube, kube_cluster, tenant_namespaces, world, dra_classes, settings
):
    settings.PORTAL_INSTANCE = unique_slug("draguard")  # a cohort of its own
    tenant = team(world, kube, tenant_namespaces, dra_classes[ONE_G], 7, prefix="dg")
    ns = tenant.namespace
    member = as_user(kube_cluster, world.member.username)
    portals = dra_quota.claim_template_name(MODEL, PROFILE)
    labels = kube.get("ResourceClaimTemplate", portals, ns)["metadata"]["labels"]
    assert labels[MANAGED_BY_LABEL] == MANAGED_BY

    # (1) the portal's template: an edit (its spec is immutable; its labels are what the
    # portal's prune and the guard read) and a delete are refused. The probe touches an
    # annotation only: one that lands before the policy's update is enforced disarms nothing.
    touch = {"metadata": {"annotations": {"gpu-portal.io/test-touch": "1"}}}

    def edit_refused() -> bool:
        try:
            member.merge_patch("ResourceClaimTemplate", portals, touch, ns)
        except ClusterError as exc:
            return "the portal made this object" in str(exc)
        return False

    wait_for("the ownership guard on claim templates", edit_refused, timeout=30)
    relabel = {"metadata": {"labels": {MANAGED_BY_LABEL: "me"}}}
    with pytest.raises(ClusterError, match="the portal made this object"):
        member.merge_patch("ResourceClaimTemplate", portals, relabel, ns)
    with pytest.raises(ClusterError, match="the portal made this object"):
        member.delete("ResourceClaimTemplate", portals, ns)
    labels = kube.get("ResourceClaimTemplate", portals, ns)["metadata"]["labels"]
    assert labels[MANAGED_BY_LABEL] == MANAGED_BY

    # (2) every device of a node (allocationMode All): Kueue cannot charge it
    every = _template(ns, "every-1g", allocationMode="All", count=None)
    wait_until_refused(member, every, ALL_DEVICES, "the claim rule in force")
    with pytest.raises(ClusterError, match=ALL_DEVICES):
        member.create(_claim(ns, "every-1g", allocationMode="All", count=None), dry_run=True)
    # the driver's class Kueue does not map (no such DeviceClass here: the API server does not
    # look, the guard does), and alternatives of a GPU class
    with pytest.raises(ClusterError, match="only the GPU classes Kueue charges"):
        member.create(
            _claim(ns, "vfio", deviceClassName="vfio.gpu.nvidia.com", selectors=None),
            dry_run=True,
        )
    alternatives = _claim(ns, "either")
    request = alternatives["spec"]["devices"]["requests"][0]
    request["firstAvailable"] = [
        {"name": "small", "deviceClassName": dra_quota.MIG_CLASS, "count": 1},
        {"name": "whole", "deviceClassName": dra_quota.GPU_CLASS, "count": 1},
    ]
    del request["exactly"]
    with pytest.raises(ClusterError, match="may not list alternatives"):
        member.create(alternatives, dry_run=True)
    # admin access: Kubernetes' own check (the namespace has no admin-access label) may answer
    # before the guard does; either way it is refused
    with pytest.raises(ClusterError):
        member.create(_claim(ns, "admin", adminAccess=True), dry_run=True)

    # (3) still accepted: a one-device claim of a portal class (counted by the namespace's
    # quota, so once the API server has counted it), and a template of the member's own,
    # theirs to change and delete
    wait_for_quota(kube, ns)
    member.create(_claim(ns, "one-1g"), dry_run=True)
    member.create(_template(ns, "my-1g"))
    member.merge_patch("ResourceClaimTemplate", "my-1g", {"metadata": {"labels": {"a": "b"}}}, ns)
    member.delete("ResourceClaimTemplate", "my-1g", ns)
