"""The guards' rules for DRA (pure): a member's claim or claim template spends only GPU devices
Kueue charges (queue guard, `render/device_guard.py`), and the team's portal-made templates are
not a member's to change or delete (ownership guard). What they refuse on the real API server:
tests/scheduler/test_dra_guard_cluster.py."""

from catalog import dra_devices
from scheduler.cluster.render.admission import cel_list
from scheduler.cluster.render.ownership_guard import render_ownership_guard
from scheduler.cluster.render.queue_guard import render_queue_guard

CLAIM = "object.spec.devices"
TEMPLATE = "object.spec.spec.devices"


def queue_rule(words: str) -> str:
    policy, _ = render_queue_guard(("kueue",), ("gpu-low",))
    (rule,) = [v for v in policy["spec"]["validations"] if words in v["message"]]
    return rule["expression"]


def test_the_queue_guard_reads_a_members_claims_and_templates_when_they_are_made():
    """Their specs are immutable: CREATE alone, so the claim controller's later updates (a
    finalizer removed) never meet the rules."""
    policy, _ = render_queue_guard(("kueue",), ("gpu-low",))
    assert {
        "apiGroups": ["resource.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
    } in policy["spec"]["matchConstraints"]["resourceRules"]


def test_each_claim_rule_reads_every_request_of_a_claim_or_a_template_and_nothing_else():
    """Both shapes, each level behind has(); a Pod, Secret or Service passes these rules."""
    for words in ("allocationMode: All", "admin access", "firstAvailable", "only the GPU classes"):
        expression = queue_rule(words)
        assert expression.startswith("request.kind.kind == 'ResourceClaim' ? ")
        assert "(request.kind.kind != 'ResourceClaimTemplate' || " in expression
        for devices in (CLAIM, TEMPLATE):
            assert (
                f"(!has({devices}) || !has({devices}.requests) || {devices}.requests.all(r, "
            ) in expression


def test_a_request_for_every_gpu_device_of_a_node_is_refused():
    expression = queue_rule("allocationMode: All")
    assert (
        "!has(r.exactly) || !has(r.exactly.allocationMode) || r.exactly.allocationMode != 'All'"
    ) in expression
    # the GPU driver's classes only: another driver's All (a NIC's) is not the guard's
    driver_classes = '["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]'
    assert (
        f"!(r.exactly.deviceClassName in {driver_classes} || "
        "r.exactly.deviceClassName.endsWith('.gpu.nvidia.com'))"
    ) in expression


def test_admin_access_is_refused_on_any_class():
    expression = queue_rule("admin access")
    assert (
        "!has(r.exactly) || !has(r.exactly.adminAccess) || !r.exactly.adminAccess"
    ) in expression
    assert "deviceClassName" not in expression


def test_alternatives_of_a_gpu_class_are_refused():
    expression = queue_rule("firstAvailable")
    assert "!has(r.firstAvailable) || !r.firstAvailable.exists(s, (s.deviceClassName in [" in (
        expression
    )
    assert "s.deviceClassName.endsWith('.gpu.nvidia.com')" in expression


def test_a_gpu_class_is_allowed_only_where_kueue_maps_it():
    """The classes the guard lets through are those of Kueue's deviceClassMappings, so the two
    cannot drift apart; the driver's others (vfio, any *.gpu.nvidia.com) are refused."""
    (mapping,) = dra_devices.device_class_mappings()
    expression = queue_rule("only the GPU classes")
    assert f"r.exactly.deviceClassName in {cel_list(mapping['deviceClassNames'])}" in expression
    assert cel_list(mapping["deviceClassNames"]) == '["gpu.nvidia.com", "mig.nvidia.com"]'
    assert "r.exactly.deviceClassName.endsWith('.gpu.nvidia.com')" in expression
    assert dra_devices.VFIO_CLASS not in mapping["deviceClassNames"]


def test_the_ownership_guard_holds_the_portals_claim_templates():
    """A member may not change or delete the team's templates the portal made (labelled
    managed-by); their own templates (no label) stay theirs."""
    policy, _ = render_ownership_guard(("kueue",))
    assert {
        "apiGroups": ["resource.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["UPDATE", "DELETE"],
        "resources": ["resourceclaimtemplates"],
    } in policy["spec"]["matchConstraints"]["resourceRules"]
    (owned,) = [
        v for v in policy["spec"]["validations"] if "the portal made this object" in v["message"]
    ]
    assert "ResourceClaimTemplate" in owned["message"]
    labels = "oldObject.metadata.labels"
    assert (
        f"!has({labels}) || !('app.kubernetes.io/managed-by' in {labels})" in (owned["expression"])
    )
