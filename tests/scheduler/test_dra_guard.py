"""The guards' rules for DRA (pure): the team's portal-made templates are not a member's to
change or delete (ownership guard)."""

from scheduler.cluster.render.ownership_guard import render_ownership_guard


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
