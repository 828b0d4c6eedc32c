"""Kueue's enforcement settings from one source (issue 48): the fragment every Kueue runs with
(queue enforcement among it), the integrations setting and its start-up check, a team's Role per
integration, and the verdict on a running Kueue's Configuration (pure), said in the console, in
/readyz and in /metrics from the remembered verdict (no cluster)."""

from __future__ import annotations

import io
import logging

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse

from catalog import dra_devices, kueue_integrations, slices
from catalog.kueue_config import QUEUE_ENFORCED_LABEL, TENANT_SELECTOR, kueue_configuration
from portal.metrics import collector
from scheduler.cluster import kube as kube_module
from scheduler.cluster import kueue_settings
from scheduler.cluster.kube import ClusterForbidden, KubeGateway
from scheduler.cluster.kueue_settings import CONFIG_KEY, Facts, KueueSettingsCheck, judge
from scheduler.cluster.render import labels
from scheduler.cluster.render.access import VIEW_ROLE, WORKLOAD_ROLE, render_access, role_rules
from scheduler.cluster.render.specs import TenantSpec
from scheduler.cluster.settings_checks import check_kueue_integrations

WHERE = {"namespace": "kueue-system", "name": "kueue-manager-config"}
JOBSET = "jobset.x-k8s.io/jobset"
RAYJOB = "ray.io/rayjob"
PYTORCH = "kubeflow.org/pytorchjob"


def config_map(config: dict | str | None = None, **changes) -> dict:
    """Kueue's ConfigMap holding the portal's fragment (as the chart ships it), with `changes`
    (None: the key removed)."""
    if not isinstance(config, str):
        # the DRA model the test settings serve (GPU_DRA_MODELS), as the chart would be told
        shipped = kueue_configuration(
            slices.UNIT_SLICES, dra_models=dra_devices.LOCAL_CLUSTER_MODELS
        )
        config = {**(config or shipped), **changes}
        config = {k: v for k, v in config.items() if v is not None}
        config = yaml.safe_dump(config)
    return {"metadata": {"name": WHERE["name"]}, "data": {CONFIG_KEY: config}}


def test_a_dra_model_needs_kueue_to_map_the_drivers_classes():
    without = {"transformations": []}
    verdict = judge(
        Facts(config_map(resources=without), "", {}),
        enabled=kueue_integrations.DEFAULT,
        dra_models=["A100-40GB"],
        **WHERE,
    )
    assert settings_missing(verdict) == ["resources.deviceClassMappings"]
    assert "A100-40GB" in verdict.missing[0].detail
    assert "gpu-portal.io/gpu-multiprocessors" in verdict.missing[0].detail
    mapped = judge(
        Facts(config_map(), "", {}),
        enabled=kueue_integrations.DEFAULT,
        dra_models=["A100-40GB"],
        **WHERE,
    )
    assert mapped.holds
    # no DRA model: nothing asked of the mapping
    assert judge(
        Facts(config_map(resources=without), "", {}), enabled=kueue_integrations.DEFAULT, **WHERE
    ).holds


def verdict_on(cm: dict | None, *, enabled=kueue_integrations.DEFAULT, crds=None, error=""):
    return judge(Facts(cm, error, crds or {}), enabled=enabled, **WHERE)


def settings_missing(verdict) -> list[str]:
    return [m.setting for m in verdict.missing]


# --- the fragment: one source of the enforcement keys --------------------------------------------


def test_the_fragment_holds_every_enforcement_key():
    fragment = kueue_configuration(slices.UNIT_SLICES)
    assert fragment["manageJobsWithoutQueueName"] is True
    assert fragment["managedJobsNamespaceSelector"] == {
        "matchLabels": {"gpu-portal.io/queue-enforced": "true"}
    }
    assert fragment["integrations"] == {
        "frameworks": ["batch/job", "pod", "deployment", "statefulset"]
    }
    assert "waitForPodsReady" in fragment
    # the selector names the label the portal sets on team namespaces, from one constant
    assert labels.QUEUE_ENFORCED_LABEL == QUEUE_ENFORCED_LABEL == "gpu-portal.io/queue-enforced"
    fragment["managedJobsNamespaceSelector"]["matchLabels"]["x"] = "y"  # a copy, not the constant
    assert TENANT_SELECTOR == {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}}


def test_the_fragment_lists_the_integrations_it_is_given():
    fragment = kueue_configuration(slices.UNIT_SLICES, integrations=["batch/job", "pod", JOBSET])
    assert fragment["integrations"]["frameworks"] == ["batch/job", "pod", JOBSET]


def test_manage_py_kueue_config_prints_the_integrations_setting(settings):
    settings.KUEUE_INTEGRATIONS = [*kueue_integrations.DEFAULT, RAYJOB]
    out = io.StringIO()
    call_command("kueue_config", stdout=out)
    printed = yaml.safe_load(out.getvalue())
    assert printed["integrations"]["frameworks"][-1] == RAYJOB
    assert printed["manageJobsWithoutQueueName"] is True
    assert printed["managedJobsNamespaceSelector"] == TENANT_SELECTOR


# --- the setting and its start-up check ----------------------------------------------------------


def test_integrations_parse_as_the_setting_and_the_local_cluster_read_them():
    assert kueue_integrations.parse(" batch/job, pod,,pod ,deployment") == (
        "batch/job",
        "pod",
        "deployment",
    )
    # unset: the local cluster's (it runs JobSet's controller), or the default asked for
    assert kueue_integrations.from_env({}) == kueue_integrations.LOCAL_CLUSTER
    assert kueue_integrations.from_env({"KUEUE_INTEGRATIONS": ""}, kueue_integrations.DEFAULT) == (
        kueue_integrations.DEFAULT
    )
    assert kueue_integrations.LOCAL_CLUSTER[: len(kueue_integrations.DEFAULT)] == (
        kueue_integrations.DEFAULT
    )
    assert kueue_integrations.from_env({"KUEUE_INTEGRATIONS": "batch/job,pod"}) == (
        "batch/job",
        "pod",
    )


def test_the_settings_default_is_the_catalogs(settings):
    from portal.settings import base

    assert tuple(base.KUEUE_INTEGRATIONS) == kueue_integrations.DEFAULT
    assert (base.KUEUE_CONFIG_NAMESPACE, base.KUEUE_CONFIG_MAP) == (
        "kueue-system",
        "kueue-manager-config",
    )
    assert check_kueue_integrations() == []


def test_an_unknown_integration_is_refused_at_start_up_with_a_hint(settings):
    settings.KUEUE_INTEGRATIONS = [*kueue_integrations.DEFAULT, "kubeflow.org/pytorchjobs"]
    (error,) = check_kueue_integrations()
    assert error.id == "scheduler.E006"
    assert "'kubeflow.org/pytorchjobs' is not a Kueue integration" in error.msg
    assert PYTORCH in error.hint and "ray.io/rayjob" in error.hint


def test_leaving_out_what_the_portal_submits_is_refused(settings):
    settings.KUEUE_INTEGRATIONS = ["batch/job", "statefulset"]
    errors = check_kueue_integrations()
    assert [e.id for e in errors] == ["scheduler.E006", "scheduler.E006"]
    assert "'pod' is missing" in errors[0].msg and "'deployment' is missing" in errors[1].msg


@pytest.mark.parametrize(
    ("name", "group", "resource"),
    [
        (JOBSET, "jobset.x-k8s.io", "jobsets"),
        ("kubeflow.org/mpijob", "kubeflow.org", "mpijobs"),
        (PYTORCH, "kubeflow.org", "pytorchjobs"),
        ("kubeflow.org/tfjob", "kubeflow.org", "tfjobs"),
        ("kubeflow.org/paddlejob", "kubeflow.org", "paddlejobs"),
        ("kubeflow.org/xgboostjob", "kubeflow.org", "xgboostjobs"),
        ("kubeflow.org/jaxjob", "kubeflow.org", "jaxjobs"),
        ("trainer.kubeflow.org/trainjob", "trainer.kubeflow.org", "trainjobs"),
        (RAYJOB, "ray.io", "rayjobs"),
        ("ray.io/raycluster", "ray.io", "rayclusters"),
        (
            "leaderworkerset.x-k8s.io/leaderworkerset",
            "leaderworkerset.x-k8s.io",
            "leaderworkersets",
        ),
    ],
)
def test_each_optional_integration_maps_to_its_kind_and_crd(name, group, resource):
    framework = kueue_integrations.FRAMEWORKS[name]
    assert (framework.group, framework.resource, framework.builtin) == (group, resource, False)
    assert framework.crd == f"{resource}.{group}"


# --- a team's Role per integration ---------------------------------------------------------------


def _rules_for(apis, *, write=True):
    return role_rules(write=write, pod_exec=False, framework_apis=apis)


def _rule(rules, group):
    return [r for r in rules if r["apiGroups"] == [group]]


def test_the_default_role_gives_the_built_in_kinds_and_nothing_more():
    assert kueue_integrations.role_apis(kueue_integrations.DEFAULT) == ()
    rules = _rules_for(())
    apps = {res: r["verbs"] for r in _rule(rules, "apps") for res in r["resources"]}
    assert {"create", "update", "patch", "delete"} <= set(apps["statefulsets"])
    assert {"create", "update", "patch", "delete"} <= set(apps["deployments"])
    assert not _rule(rules, "jobset.x-k8s.io") and not _rule(rules, "kubeflow.org")


@pytest.mark.parametrize(
    ("enabled", "group", "resources"),
    [
        ((JOBSET,), "jobset.x-k8s.io", ["jobsets"]),
        ((PYTORCH, "kubeflow.org/mpijob"), "kubeflow.org", ["mpijobs", "pytorchjobs"]),
        ((RAYJOB, "ray.io/raycluster"), "ray.io", ["rayclusters", "rayjobs"]),
        (("trainer.kubeflow.org/trainjob",), "trainer.kubeflow.org", ["trainjobs"]),
        (
            ("leaderworkerset.x-k8s.io/leaderworkerset",),
            "leaderworkerset.x-k8s.io",
            ["leaderworkersets"],
        ),
    ],
)
def test_members_may_run_the_kinds_of_enabled_integrations_and_viewers_read_them(
    enabled, group, resources
):
    apis = kueue_integrations.role_apis((*kueue_integrations.DEFAULT, *enabled))
    (member,) = _rule(_rules_for(apis), group)
    assert member == {
        "apiGroups": [group],
        "resources": resources,
        "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
    }
    (viewer,) = _rule(_rules_for(apis, write=False), group)
    assert viewer["verbs"] == ["get", "list", "watch"]


def _spec(**kw) -> TenantSpec:
    return TenantSpec(
        slug="team-a",
        name="Team A",
        active=True,
        gpu_quota={},
        gpu_resource_names=("nvidia.com/gpu",),
        **kw,
    )


def test_an_integration_whose_crd_is_absent_is_reported_and_not_rendered():
    enabled = (*kueue_integrations.DEFAULT, JOBSET, RAYJOB)
    verdict = verdict_on(
        config_map(integrations={"frameworks": list(enabled)}),
        enabled=enabled,
        crds={"jobsets.jobset.x-k8s.io": False, "rayjobs.ray.io": True},
    )
    assert verdict.usable == (*kueue_integrations.DEFAULT, RAYJOB)
    (missing,) = verdict.missing
    assert (missing.setting, missing.want) == ("CRD", "jobsets.jobset.x-k8s.io")
    assert "is not installed" in missing.detail and "teams are not given jobsets" in missing.detail

    spec = _spec(framework_apis=kueue_integrations.role_apis(verdict.usable))
    roles = {o["metadata"]["name"]: o for o in render_access(spec, "tenant-team-a")}
    for role in (WORKLOAD_ROLE, VIEW_ROLE):
        groups = {g for rule in roles[role]["rules"] for g in rule["apiGroups"]}
        assert "ray.io" in groups and "jobset.x-k8s.io" not in groups


def test_a_crd_the_portal_may_not_read_is_reported_not_rendered():
    enabled = (*kueue_integrations.DEFAULT, PYTORCH)
    verdict = verdict_on(
        config_map(integrations={"frameworks": list(enabled)}),
        enabled=enabled,
        crds={"pytorchjobs.kubeflow.org": None},
    )
    assert PYTORCH not in verdict.usable
    assert settings_missing(verdict) == ["CRD"]
    assert "may not read it" in verdict.missing[0].detail


# --- the verdict on the running Configuration (pure) ---------------------------------------------


def test_the_shipped_fragment_holds():
    verdict = verdict_on(config_map())
    assert verdict.holds and verdict.missing == ()
    assert verdict.usable == kueue_integrations.DEFAULT
    assert verdict.as_dict() == {
        "holds": True,
        "missing": [],
        "usable": list(kueue_integrations.DEFAULT),
    }


def test_the_whole_release_configuration_with_the_fragment_merged_holds():
    release = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    release |= {"health": {"healthProbeBindAddress": ":8081"}, "namespace": "kueue-system"}
    assert verdict_on(config_map({**release, **kueue_configuration(slices.UNIT_CLASS)})).holds


@pytest.mark.parametrize("value", [None, False, "true"])
def test_without_manage_jobs_without_queue_name_it_says_to_set_it(value):
    verdict = verdict_on(config_map(manageJobsWithoutQueueName=value))
    (missing,) = verdict.missing
    assert (missing.setting, missing.want) == ("manageJobsWithoutQueueName", "true")
    assert "manageJobsWithoutQueueName: true" in missing.detail
    assert "manage.py kueue_config" in missing.detail


def test_a_selector_missing_or_not_selecting_team_namespaces_is_said():
    absent = verdict_on(config_map(managedJobsNamespaceSelector=None))
    assert settings_missing(absent) == ["managedJobsNamespaceSelector"]
    assert "has no managedJobsNamespaceSelector" in absent.missing[0].detail
    assert 'gpu-portal.io/queue-enforced: "true"' in absent.missing[0].want

    other = {"matchLabels": {"team": "true"}}
    wrong = verdict_on(config_map(managedJobsNamespaceSelector=other))
    assert settings_missing(wrong) == ["managedJobsNamespaceSelector"]
    assert "does not select team namespaces" in wrong.missing[0].detail


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {QUEUE_ENFORCED_LABEL: "true"}},
        {"matchExpressions": [{"key": QUEUE_ENFORCED_LABEL, "operator": "In", "values": ["true"]}]},
        {"matchExpressions": [{"key": QUEUE_ENFORCED_LABEL, "operator": "Exists"}]},
        {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", "kueue-system"],
                }
            ]
        },
    ],
)
def test_any_selector_that_selects_team_namespaces_holds(selector):
    assert verdict_on(config_map(managedJobsNamespaceSelector=selector)).holds


@pytest.mark.parametrize(
    "selector",
    [
        {"matchLabels": {QUEUE_ENFORCED_LABEL: "false"}},
        {"matchExpressions": [{"key": QUEUE_ENFORCED_LABEL, "operator": "DoesNotExist"}]},
        {"matchExpressions": [{"key": QUEUE_ENFORCED_LABEL, "operator": "Gt", "values": ["1"]}]},
        "gpu-portal.io/queue-enforced=true",
    ],
)
def test_a_selector_that_misses_team_namespaces_does_not_hold(selector):
    verdict = verdict_on(config_map(managedJobsNamespaceSelector=selector))
    assert settings_missing(verdict) == ["managedJobsNamespaceSelector"]


def test_every_enabled_integration_must_be_in_kueues_frameworks():
    lacking = verdict_on(config_map(integrations={"frameworks": ["batch/job", "deployment"]}))
    assert [(m.setting, m.want) for m in lacking.missing] == [
        ("integrations.frameworks", "pod"),
        ("integrations.frameworks", "statefulset"),
    ]
    assert "lacks pod" in lacking.missing[0].detail
    # nothing listed: Kueue's own default, batch/job alone
    unset = verdict_on(config_map(integrations=None))
    assert [m.want for m in unset.missing] == ["pod", "deployment", "statefulset"]
    # an enabled optional one too, whose CRD is there
    enabled = (*kueue_integrations.DEFAULT, JOBSET)
    verdict = verdict_on(config_map(), enabled=enabled, crds={"jobsets.jobset.x-k8s.io": True})
    assert [(m.setting, m.want) for m in verdict.missing] == [("integrations.frameworks", JOBSET)]


def test_without_wait_for_pods_ready_it_says_to_set_it():
    verdict = verdict_on(config_map(waitForPodsReady=None))
    (missing,) = verdict.missing
    assert missing.setting == "waitForPodsReady" and "KUEUE_PODS_READY_*" in missing.detail
    # v1beta1's way of turning it off
    off = verdict_on(config_map(waitForPodsReady={"enable": False, "timeout": "5m"}))
    assert settings_missing(off) == ["waitForPodsReady"]


def test_all_missing_says_each():
    bare = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    verdict = verdict_on(config_map(yaml.safe_dump(bare)))
    assert settings_missing(verdict) == [
        "manageJobsWithoutQueueName",
        "managedJobsNamespaceSelector",
        "integrations.frameworks",
        "integrations.frameworks",
        "integrations.frameworks",
        "waitForPodsReady",
    ]


@pytest.mark.parametrize(
    ("cm", "error", "says"),
    [
        (None, "", "there is no such ConfigMap"),
        (None, "get ConfigMap ...: 403 forbidden", "it cannot be read (get ConfigMap ...: 403"),
        ({"metadata": {}, "data": {"other.yaml": "a: 1"}}, "", f"it has no key {CONFIG_KEY}"),
        ({"metadata": {}}, "", f"it has no key {CONFIG_KEY}"),
        (config_map("a: [1"), "", "is not YAML"),
        (config_map("just text"), "", "is not a Configuration"),
    ],
)
def test_a_configuration_that_cannot_be_read_says_so(cm, error, says):
    verdict = verdict_on(cm, error=error)
    (missing,) = verdict.missing
    assert missing.setting == "ConfigMap" and not verdict.holds
    assert "kueue-system/kueue-manager-config" in missing.detail and says in missing.detail
    assert "KUEUE_CONFIG_NAMESPACE" in missing.detail
    assert verdict.usable == kueue_integrations.DEFAULT  # the Role does not depend on it


# --- the check: read through the gateway, remembered, said once ---------------------------------


def test_the_gateway_reads_the_config_map_and_each_crd_and_a_refusal_is_a_fact():
    gateway = KubeGateway(None)  # type: ignore[arg-type]  # its reads are stood in for
    asked = []

    def get(kind, name, namespace=None):
        asked.append((kind, name, namespace))
        if kind == "ConfigMap":
            raise ClusterForbidden("get ConfigMap kueue-system/kueue-manager-config: 403 no")
        if name == "rayjobs.ray.io":
            raise ClusterForbidden("get CRD: 403 no")
        return {"metadata": {"name": name}} if name == "jobsets.jobset.x-k8s.io" else None

    gateway.get = get  # type: ignore[method-assign]
    facts = gateway._kueue_settings_facts(
        "kueue-system",
        "kueue-manager-config",
        ("jobsets.jobset.x-k8s.io", "pytorchjobs.kubeflow.org", "rayjobs.ray.io"),
    )
    assert facts.config_map is None and "403" in facts.config_error
    assert facts.crds == {
        "jobsets.jobset.x-k8s.io": True,
        "pytorchjobs.kubeflow.org": False,
        "rayjobs.ray.io": None,
    }
    assert asked[0] == ("ConfigMap", "kueue-manager-config", "kueue-system")


def test_the_check_reads_once_per_ttl_or_when_fresh_remembers_and_says_each_change_once(
    settings, caplog
):
    settings.KUEUE_INTEGRATIONS = [*kueue_integrations.DEFAULT, JOBSET]
    settings.KUEUE_CONFIG_NAMESPACE, settings.KUEUE_CONFIG_MAP = "kueue", "its-config"
    reads = []
    answer = {"cm": config_map(manageJobsWithoutQueueName=None)}

    def read(namespace, name, crds):
        reads.append((namespace, name, crds))
        return Facts(answer["cm"], "", {"jobsets.jobset.x-k8s.io": True})

    check = KueueSettingsCheck(read)
    with caplog.at_level(logging.ERROR, logger="scheduler.cluster.kueue_settings"):
        first = check.verdict()
        assert check.verdict() is first  # within the TTL: not read again
        check.verdict(fresh=True)  # the same verdict: not said again
    assert reads == [("kueue", "its-config", ("jobsets.jobset.x-k8s.io",))] * 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2  # manageJobsWithoutQueueName, and jobset not in the frameworks
    assert any("manageJobsWithoutQueueName" in line for line in said)
    remembered = kueue_settings.remembered()
    assert remembered == first.as_dict() and remembered["holds"] is False
    assert JOBSET in remembered["usable"]

    answer["cm"] = config_map(integrations={"frameworks": [*kueue_integrations.DEFAULT, JOBSET]})
    assert check.verdict(fresh=True).holds
    assert kueue_settings.remembered()["holds"] is True


# --- said: the console, /readyz, /metrics (the verdict remembered, no cluster) -------------------


@pytest.fixture
def missing_settings():
    verdict = verdict_on(config_map(manageJobsWithoutQueueName=None, waitForPodsReady=None))
    kueue_settings.remember(verdict)
    return verdict


@pytest.mark.django_db
def test_the_console_tells_the_platform_team_what_to_set(client, world, missing_settings):
    client.force_login(world.admin)
    page = client.get(reverse("home")).content.decode()
    assert "Kueue is not set up as the portal needs." in page
    assert "lacks manageJobsWithoutQueueName: true" in page
    assert "has no waitForPodsReady" in page
    # a member can set nothing there: no banner
    client.force_login(world.member)
    page = client.get(reverse("home")).content.decode()
    assert "Kueue is not set up" not in page


@pytest.mark.django_db
def test_no_banner_when_kueue_holds(client, world):
    kueue_settings.remember(verdict_on(config_map()))
    client.force_login(world.admin)
    assert "Kueue is not set up" not in client.get(reverse("home")).content.decode()


@pytest.mark.django_db
def test_readyz_gives_the_reasons_from_the_remembered_verdict(client, settings, missing_settings):
    settings.KUBECONFIG = "/nonexistent/kubeconfig"  # no cluster: what another process found
    kube_module.reset_gateway()
    try:
        body = client.get(reverse("readyz")).json()
    finally:
        kube_module.reset_gateway()
    assert body["checks"]["cluster"].startswith("unavailable")
    assert body["kueue_settings"] == [m.detail for m in missing_settings.missing]
    assert "Set it;" in body["kueue_settings"][0]


@pytest.mark.django_db
def test_metrics_say_each_missing_setting_and_what_to_set(missing_settings):
    got = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in collector.PortalStateCollector().collect()
        for sample in family.samples
    }
    kueue = {k: v for k, v in got.items() if k[0] == "gpu_portal_kueue_setting_missing"}
    assert kueue == {
        (
            "gpu_portal_kueue_setting_missing",
            (("setting", "manageJobsWithoutQueueName"), ("want", "true")),
        ): 1,
        (
            "gpu_portal_kueue_setting_missing",
            (("setting", "waitForPodsReady"), ("want", "KUEUE_PODS_READY_*")),
        ): 1,
    }
    assert got[("gpu_portal_metrics_source_up", (("source", "cache"),))] == 1


@pytest.mark.django_db
def test_metrics_say_nothing_missing_when_kueue_holds():
    kueue_settings.remember(verdict_on(config_map()))
    names = {
        sample.name
        for family in collector.PortalStateCollector().collect()
        for sample in family.samples
    }
    assert "gpu_portal_kueue_setting_missing" not in names
