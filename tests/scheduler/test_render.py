"""Rendering is pure: compare manifests to expected dicts, many cases, fast."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import names
from scheduler.cluster.render.kueue import render_flavors
from scheduler.cluster.render.labels import HASH_ANNOTATION
from scheduler.cluster.render.namespace import render_namespace
from scheduler.cluster.render.network import egress_blocks
from scheduler.cluster.render.priorities import (
    render_priority_classes,
    render_workload_priority_classes,
)
from scheduler.cluster.render.queue_guard import render_queue_guard
from scheduler.cluster.render.specs import Member, PriorityClassSpec, TenantSpec
from scheduler.cluster.render.tenant import render_tenant

NAMES = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb")
PCS = ("gpu-critical", "gpu-high", "gpu-low")
DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def spec(**kw):
    base = dict(
        slug="team-a",
        name="Team A",
        active=True,
        gpu_quota={"nvidia.com/gpu": 8, "nvidia.com/mig-3g.40gb": 4},
        gpu_resource_names=NAMES,
        members=(
            Member("alice", "owner"),
            Member("bob", "member"),
            Member("dave", "viewer"),
            Member("robot-team-a", "member", is_robot=True),
        ),
        allowed_priority_classes=("gpu-high", "gpu-low"),
        all_priority_classes=PCS,
    )
    base.update(kw)
    return TenantSpec(**base)


def by_key(manifests):
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def strip_hash(m):
    m = {**m, "metadata": {**m["metadata"]}}
    ann = {k: v for k, v in m["metadata"].get("annotations", {}).items() if k != HASH_ANNOTATION}
    m["metadata"]["annotations"] = ann
    if not ann:
        del m["metadata"]["annotations"]
    return m


LABELS = {
    "app.kubernetes.io/managed-by": "gpu-portal",
    "gpu-portal.io/instance": "default",
    "gpu-portal.io/tenant": "team-a",
}


def test_namespace():
    ns = render_namespace(spec())
    assert strip_hash(ns) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "tenant-team-a",
            "labels": {
                **LABELS,
                "gpu-portal.io/queue-enforced": "true",
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/audit": "restricted",
            },
            "annotations": {"gpu-portal.io/display-name": "Team A"},
        },
    }


def test_gpu_quota_counts_requests_only_with_zero_lines_for_the_rest():
    quota = by_key(render_tenant(spec()))[("ResourceQuota", "gpu-portal-quota")]
    assert strip_hash(quota) == {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-portal-quota", "namespace": "tenant-team-a", "labels": LABELS},
        "spec": {
            "hard": {
                "requests.nvidia.com/gpu": "8",
                "requests.nvidia.com/mig-1g.10gb": "0",
                "requests.nvidia.com/mig-3g.40gb": "4",
                "requests.cpu": "64",
                "requests.memory": "256Gi",
                "pods": "200",
                "persistentvolumeclaims": "50",
                "requests.storage": "10Ti",
                "services.loadbalancers": "0",
                "services.nodeports": "0",
            }
        },
    }
    for m in render_tenant(spec()):
        if m["kind"] == "ResourceQuota":
            assert not any(k.startswith("limits.nvidia") for k in m["spec"]["hard"])


def test_priority_quotas():
    objs = by_key(render_tenant(spec()))
    critical = objs[("ResourceQuota", "gpu-portal-priority-gpu-critical")]
    assert critical["spec"]["scopeSelector"] == {
        "matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu-critical"]}
        ]
    }
    # not allowed at gpu-critical: zero GPUs and zero pods there
    assert critical["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "0",
        "requests.nvidia.com/mig-1g.10gb": "0",
        "requests.nvidia.com/mig-3g.40gb": "0",
        "pods": "0",
    }
    assert ("ResourceQuota", "gpu-portal-priority-gpu-high") not in objs


def test_critical_units_cap_each_resource_at_what_was_granted():
    s = spec(allowed_priority_classes=PCS, critical_units=2)
    critical = by_key(render_tenant(s))[("ResourceQuota", "gpu-portal-priority-gpu-critical")]
    assert critical["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "2",
        "requests.nvidia.com/mig-1g.10gb": "0",
        "requests.nvidia.com/mig-3g.40gb": "2",
    }


def test_a_forbidden_priority_class_gets_a_zero_pod_quota():
    objs = by_key(render_tenant(spec(allowed_priority_classes=("gpu-low",))))
    high = objs[("ResourceQuota", "gpu-portal-priority-gpu-high")]
    assert high["spec"]["hard"] == {"pods": "0"}


def test_role_bindings_per_role_with_the_robot_as_service_account():
    objs = by_key(render_tenant(spec()))
    owners = objs[("RoleBinding", "gpu-portal-team-owners")]
    assert owners["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gpu-portal-workloads",
    }
    assert owners["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}
    ]
    members = objs[("RoleBinding", "gpu-portal-team-members")]
    assert members["roleRef"]["name"] == "gpu-portal-workloads"
    assert members["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
        {"kind": "ServiceAccount", "name": "ci-robot", "namespace": "tenant-team-a"},
    ]
    assert objs[("RoleBinding", "gpu-portal-team-viewers")]["roleRef"]["name"] == "gpu-portal-view"
    assert objs[("ServiceAccount", "ci-robot")]["automountServiceAccountToken"] is False


def test_provider_groups_are_bound_with_their_role_and_the_api_servers_prefix():
    objs = by_key(
        render_tenant(
            spec(
                provider_groups=(("vision-leads", "owner"), ("vision-all", "viewer")),
                group_prefix="oidc:",
            )
        )
    )
    owners = objs[("RoleBinding", "gpu-portal-team-owners")]["subjects"]
    assert owners[-1] == {
        "kind": "Group",
        "apiGroup": "rbac.authorization.k8s.io",
        "name": "oidc:vision-leads",
    }
    viewers = objs[("RoleBinding", "gpu-portal-team-viewers")]["subjects"]
    assert {
        "kind": "Group",
        "apiGroup": "rbac.authorization.k8s.io",
        "name": "oidc:vision-all",
    } in (viewers)
    members = objs[("RoleBinding", "gpu-portal-team-members")]["subjects"]
    assert not [s for s in members if s["kind"] == "Group"]


def _granted(role: dict) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_workload_role_runs_workloads_but_cannot_change_access_isolation_or_quota():
    objs = by_key(render_tenant(spec()))
    granted = _granted(objs[("Role", "gpu-portal-workloads")])
    for needed in [
        ("batch", "jobs", "create"),
        ("apps", "deployments", "patch"),
        ("", "pods", "delete"),
        ("", "pods/log", "get"),
        ("", "pods/exec", "create"),
        ("", "configmaps", "create"),
        ("", "secrets", "create"),
        ("", "persistentvolumeclaims", "create"),
    ]:
        assert needed in granted
    writes = {"create", "update", "patch", "delete", "deletecollection", "bind", "escalate", "*"}
    for group, resource in [
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("networking.k8s.io", "networkpolicies"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("", "namespaces"),
        ("", "serviceaccounts"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "workloads"),
    ]:
        assert not {verb for g, r, verb in granted if (g, r) == (group, resource)} & writes
    assert not any("*" in (g, r, v) for g, r, v in granted)


def test_viewers_read_but_see_no_secrets_and_exec_follows_the_setting():
    objs = by_key(render_tenant(spec(pod_exec=False)))
    view = _granted(objs[("Role", "gpu-portal-view")])
    assert ("batch", "jobs", "get") in view
    assert {v for _, _, v in view} == {"get", "list", "watch"}
    assert not any(r == "secrets" for _, r, _ in view)
    work = _granted(objs[("Role", "gpu-portal-workloads")])
    assert not any(r in ("pods/exec", "pods/attach", "pods/portforward") for _, r, _ in work)


def test_an_inactive_tenant_has_no_roles_or_bindings():
    objs = by_key(render_tenant(spec(active=False)))
    assert not [k for k in objs if k[0] in ("Role", "RoleBinding")]


def test_roles_without_people_get_no_binding_and_user_prefix_applies():
    objs = by_key(render_tenant(spec(members=(Member("alice", "owner"),), user_prefix="oidc:")))
    assert [k for k in objs if k[0] == "RoleBinding"] == [("RoleBinding", "gpu-portal-team-owners")]
    assert objs[("RoleBinding", "gpu-portal-team-owners")]["subjects"][0]["name"] == "oidc:alice"


NS_NAME = "kubernetes.io/metadata.name"


def test_network_policy_admits_own_and_platform_namespace_only():
    np = by_key(render_tenant(spec()))[("NetworkPolicy", "gpu-portal-isolation")]
    both = {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NS_NAME, "operator": "In", "values": ["gpu-portal-system", "tenant-team-a"]}
            ]
        }
    }
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["ingress"] == [{"from": [both]}]
    # Egress by default: DNS, the own namespace and the portal's web port; no CIDR, so no
    # metadata address and no API server, and not the portal's database or broker.
    assert np["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": NS_NAME, "operator": "In", "values": ["kube-system"]}
                        ]
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": NS_NAME, "operator": "In", "values": ["tenant-team-a"]}
                        ]
                    }
                }
            ]
        },
        {
            "to": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": NS_NAME, "operator": "In", "values": ["gpu-portal-system"]}
                        ]
                    },
                    "podSelector": {
                        "matchLabels": {
                            "app.kubernetes.io/component": "web",
                            "app.kubernetes.io/name": "gpu-portal",
                        }
                    },
                }
            ],
            "ports": [{"protocol": "TCP", "port": 8000}],
        },
    ]


def test_allowed_egress_cidrs_except_the_metadata_address_and_the_api_server():
    np = by_key(
        render_tenant(
            spec(
                egress_allowed_cidrs=("0.0.0.0/0", "10.20.0.0/16", "::/0", "169.254.169.254/32"),
                egress_denied_cidrs=("169.254.169.254/32", "fd00:ec2::254/128", "10.20.0.1/32"),
            )
        )
    )[("NetworkPolicy", "gpu-portal-isolation")]
    assert np["spec"]["egress"][3] == {
        "to": [
            # every denied address inside a block is excepted from it, per address family
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.20.0.1/32", "169.254.169.254/32"]}},
            {"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.0.1/32"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
            # a block that is itself denied is left out
        ]
    }


def test_egress_blocks_leave_out_what_is_denied_and_keep_the_rest_whole():
    assert egress_blocks(("192.168.0.0/24",), ("169.254.169.254/32",)) == [
        {"ipBlock": {"cidr": "192.168.0.0/24"}}
    ]
    assert egress_blocks(("169.254.0.0/16",), ("169.254.0.0/16",)) == []
    assert egress_blocks((), ("169.254.169.254/32",)) == []


def test_limit_range_defaults():
    lr = by_key(render_tenant(spec()))[("LimitRange", "gpu-portal-defaults")]
    assert lr["spec"]["limits"] == [
        {
            "type": "Container",
            "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
            "default": {"cpu": "2", "memory": "4Gi"},
        }
    ]


def test_suspended_tenant_keeps_its_namespace_but_may_run_nothing():
    objs = by_key(render_tenant(spec(active=False)))
    hard = objs[("ResourceQuota", "gpu-portal-quota")]["spec"]["hard"]
    assert set(hard.values()) == {"0"}
    assert not [k for k in objs if k[0] == "RoleBinding"]


def test_zero_grants_means_zero_on_every_gpu_line():
    hard = by_key(render_tenant(spec(gpu_quota={})))[("ResourceQuota", "gpu-portal-quota")]["spec"][
        "hard"
    ]
    assert {k: v for k, v in hard.items() if "nvidia" in k} == {f"requests.{n}": "0" for n in NAMES}


def test_many_classes():
    names = tuple(f"nvidia.com/mig-{i}g.{i}0gb" for i in range(1, 60))
    hard = by_key(render_tenant(spec(gpu_resource_names=names, gpu_quota={names[5]: 3})))[
        ("ResourceQuota", "gpu-portal-quota")
    ]["spec"]["hard"]
    assert len([k for k in hard if "nvidia" in k]) == 59 and hard[f"requests.{names[5]}"] == "3"


def test_every_object_is_labelled_and_hashed_and_the_hash_follows_content():
    a = render_tenant(spec())
    b = render_tenant(spec(gpu_quota={"nvidia.com/gpu": 7}))
    for m in a:
        assert m["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
        assert m["metadata"]["labels"]["gpu-portal.io/tenant"] == "team-a"
        assert len(m["metadata"]["annotations"][HASH_ANNOTATION]) == 16
    ha, hb = by_key(a), by_key(b)
    key = ("ResourceQuota", "gpu-portal-quota")
    assert ha[key]["metadata"]["annotations"] != hb[key]["metadata"]["annotations"]
    same = ("LimitRange", "gpu-portal-defaults")
    assert ha[same] == hb[same]
    assert render_tenant(spec()) == a  # deterministic


def test_unicode_display_names_stay_in_annotations():
    ns = render_namespace(spec(name="Équipe Vision 視覚"))
    assert ns["metadata"]["annotations"]["gpu-portal.io/display-name"] == "Équipe Vision 視覚"
    assert ns["metadata"]["name"] == "tenant-team-a"


@given(st.text(min_size=0, max_size=120))
def test_names_are_always_dns_labels_and_distinct_inputs_stay_distinct(value):
    name = names.dns_label(value)
    assert DNS.match(name) and len(name) <= 63
    if names.dns_label(value + "x") == name:
        pytest.fail("two inputs, one name")


def test_long_slug_is_truncated_with_a_hash():
    long = "a" * 40
    ns = names.namespace_name(long, prefix="a-very-long-platform-prefix-")
    assert len(ns) <= 63 and DNS.match(ns)
    assert ns != names.namespace_name(long[:-1] + "b", prefix="a-very-long-platform-prefix-")
    assert names.namespace_name("team-a") == "tenant-team-a"


def test_priority_classes():
    pcs = render_priority_classes(
        [
            PriorityClassSpec("gpu-critical", 1_000_000),
            PriorityClassSpec("gpu-low", 100_000),
        ]
    )
    assert strip_hash(pcs[0]) == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": "gpu-critical",
            "labels": {"app.kubernetes.io/managed-by": "gpu-portal"},
        },
        "value": 1_000_000,
        "preemptionPolicy": "PreemptLowerPriority",
    }


# --- Kueue ------------------------------------------------------------------------------------

from scheduler.cluster.render.specs import FlavorSpec, QueueLine  # noqa: E402

LINES = (
    QueueLine("a100-80gb", "nvidia.com/gpu", 2, borrowing_limit=1),
    QueueLine("a100-80gb", "nvidia.com/mig-3g.40gb", 0),
    QueueLine("h100-80gb", "nvidia.com/mig-3g.40gb", 4, borrowing_limit=2, lend=False),
)


def test_a_tenant_with_queue_lines_gets_a_cluster_queue_in_the_cohort_and_a_local_queue():
    objs = by_key(render_tenant(spec(queue_lines=LINES, cohort="gpu-portal-test")))
    cq = strip_hash(objs[("ClusterQueue", "tenant-team-a")])
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert "namespace" not in cq["metadata"] and cq["metadata"]["labels"] == LABELS
    assert cq["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "tenant-team-a"}
    }
    assert cq["spec"]["cohortName"] == "gpu-portal-test"
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    cpu_memory, gpus = cq["spec"]["resourceGroups"]
    assert cpu_memory["coveredResources"] == ["cpu", "memory"]
    assert cpu_memory["flavors"][0]["resources"][0] == {
        "name": "cpu",
        "nominalQuota": "64",
        "borrowingLimit": "0",
        "lendingLimit": "0",
    }
    # Kueue wants every flavor of a group to list every covered resource, in order
    assert gpus["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]
    assert gpus["flavors"] == [
        {
            "name": "a100-80gb",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "2", "borrowingLimit": "1"},
                {"name": "nvidia.com/mig-3g.40gb", "nominalQuota": "0", "borrowingLimit": "0"},
            ],
        },
        {
            "name": "h100-80gb",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "0"},
                {
                    "name": "nvidia.com/mig-3g.40gb",
                    "nominalQuota": "4",
                    "borrowingLimit": "2",
                    "lendingLimit": "0",
                },
            ],
        },
    ]
    lq = strip_hash(objs[("LocalQueue", "default")])
    assert lq["metadata"]["namespace"] == "tenant-team-a"
    assert lq["spec"] == {"clusterQueue": "tenant-team-a", "stopPolicy": "None"}


def test_a_suspended_tenant_queue_is_drained_and_a_held_one_admits_nothing_new():
    objs = by_key(render_tenant(spec(queue_lines=LINES, active=False)))
    cq = objs[("ClusterQueue", "tenant-team-a")]
    assert cq["spec"]["stopPolicy"] == "HoldAndDrain"
    assert objs[("LocalQueue", "default")]["spec"]["stopPolicy"] == "HoldAndDrain"
    quotas = [
        r["nominalQuota"]
        for g in cq["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
    ]
    assert set(quotas) == {"0"}
    held = by_key(render_tenant(spec(queue_lines=LINES, queue_held=True)))
    assert held[("LocalQueue", "default")]["spec"]["stopPolicy"] == "Hold"
    assert held[("ClusterQueue", "tenant-team-a")]["spec"]["stopPolicy"] == "None"


def test_flavors_and_resources_a_team_may_not_use_are_left_out():
    lines = (*LINES, QueueLine("l40s-48gb", "nvidia.com/gpu.shared", 0), QueueLine("x", "y", 0))
    cq = by_key(render_tenant(spec(queue_lines=lines)))[("ClusterQueue", "tenant-team-a")]
    gpus = cq["spec"]["resourceGroups"][1]
    assert gpus["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]
    assert [f["name"] for f in gpus["flavors"]] == ["a100-80gb", "h100-80gb"]


def test_a_team_without_gpu_lines_still_gets_a_queue_for_cpu_work():
    objs = by_key(render_tenant(spec()))
    groups = objs[("ClusterQueue", "tenant-team-a")]["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["cpu", "memory"]]
    assert ("LocalQueue", "default") in objs


def test_flavors_select_the_product_label_and_carry_tolerations():
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    flavors = render_flavors(
        [
            FlavorSpec("h100-80gb", "NVIDIA-H100-80GB-HBM3", (toleration,)),
            FlavorSpec("a100-80gb", "X"),
        ]
    )
    assert [f["metadata"]["name"] for f in flavors] == [
        "gpu-portal-default",
        "a100-80gb",
        "h100-80gb",
    ]
    assert flavors[0]["spec"] == {}
    assert strip_hash(flavors[2])["spec"] == {
        "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [toleration],
    }


def test_workload_priority_classes_mirror_the_pod_priority_classes():
    wpcs = render_workload_priority_classes([PriorityClassSpec("gpu-high", 500_000, "d")])
    assert strip_hash(wpcs[0]) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "gpu-high", "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
        "value": 500_000,
        "description": "d",
    }


def test_the_queue_guard_lists_the_portal_priority_classes_and_no_other():
    policy, binding = render_queue_guard(("kueue",), ("gpu-low", "gpu-high"))
    rule = next(v for v in policy["spec"]["validations"] if "only the portal's" in v["message"])
    assert "in ['', 'gpu-high', 'gpu-low']" in rule["expression"]
    assert "system-node-critical" not in rule["expression"]
    assert "gpu-high, gpu-low" in rule["message"]


def test_a_cidr_setting_that_is_not_a_cidr_fails_the_startup_checks(settings):
    from scheduler.cluster.settings_checks import check_egress_cidrs

    settings.TENANT_EGRESS_ALLOWED_CIDRS = ["10.0.0.0/8", "internet"]
    settings.TENANT_EGRESS_DENIED_CIDRS = ["169.254.169.254/32"]
    errors = check_egress_cidrs()
    assert [e.msg for e in errors] == [
        "TENANT_EGRESS_ALLOWED_CIDRS has 'internet', which is not a CIDR"
    ]
    settings.TENANT_EGRESS_ALLOWED_CIDRS = ["10.0.0.0/8"]
    assert check_egress_cidrs() == []
