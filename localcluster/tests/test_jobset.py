"""The JobSet controller's command line, config, CRD discovery and webhook configurations (pure:
no cluster, no build). The manifests are small copies of what sigs.k8s.io/jobset v0.12.0 ships
under config/components, laid out as the build copies them next to the binary."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from localcluster import build, cluster, components, jobset

MANIFESTS = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}
  failurePolicy: Fail
  name: mjobset.kb.io
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE],
     resources: [jobsets]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system,
              path: /validate-jobset-x-k8s-io-v1alpha2-jobset}
  failurePolicy: Fail
  name: vjobset.kb.io
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE, UPDATE],
     resources: [jobsets]}
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
  failurePolicy: Fail
  name: vpod.kb.io
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  sideEffects: None
"""

KUSTOMIZATION = """\
resources:
- manifests.yaml
- service.yaml
patches:
- path: patches/mutating-patch.yaml
  target: {group: admissionregistration.k8s.io, version: v1,
           kind: MutatingWebhookConfiguration, name: mutating-webhook-configuration}
- path: patches/validating-patch.yaml
  target: {group: admissionregistration.k8s.io, version: v1,
           kind: ValidatingWebhookConfiguration, name: validating-webhook-configuration}
"""


def pod_patch(name: str, path: str) -> str:
    return textwrap.dedent(
        f"""\
        - op: replace
          path: /webhooks/1
          value:
            admissionReviewVersions: [v1]
            clientConfig:
              service: {{name: webhook-service, namespace: system, path: {path}}}
            failurePolicy: Fail
            name: {name}
            objectSelector:
              matchExpressions:
              - {{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}}
            rules:
            - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}}
            sideEffects: None
        """
    )


def crd_text(versions: list[str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "jobsets.jobset.x-k8s.io"},
            "spec": {
                "group": "jobset.x-k8s.io",
                "names": {"kind": "JobSet", "plural": "jobsets"},
                "scope": "Namespaced",
                "versions": [
                    {"name": v, "served": True, "storage": i == 0} for i, v in enumerate(versions)
                ],
            },
        }
    )


@pytest.fixture
def assets(tmp_path, monkeypatch) -> Path:
    """A built JobSet's assets (bin/jobset-<version>/) in a temporary cache, a cluster CA in a
    temporary PKI, and the API server on 7443 (so JobSet's ports are 7449-7451)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LOCALCLUSTER_PORT", "7443")
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.crt").write_bytes(b"not a real CA")
    monkeypatch.setattr(jobset, "PKI", pki)
    root = build.bin_dir(jobset.component())
    (root / "crds").mkdir(parents=True)
    (root / "crds" / "jobset.x-k8s.io_jobsets.yaml").write_text(crd_text(["v1alpha2"]))
    (root / "webhook" / "patches").mkdir(parents=True)
    (root / "webhook" / "manifests.yaml").write_text(MANIFESTS)
    (root / "webhook" / "kustomization.yaml").write_text(KUSTOMIZATION)
    (root / "webhook" / "patches" / "mutating-patch.yaml").write_text(
        pod_patch("mpod.kb.io", "/mutate--v1-pod")
    )
    (root / "webhook" / "patches" / "validating-patch.yaml").write_text(
        pod_patch("vpod.kb.io", "/validate--v1-pod")
    )
    return root


def test_the_build_makes_the_jobset_controller_from_the_module_root_with_its_manifests():
    comp = jobset.component()
    assert comp.tag == f"jobset-{build.JOBSET_VERSION}"
    assert comp.packages == {"jobset": "sigs.k8s.io/jobset"}  # main.go at the module root
    assert f"pkg/version.GitVersion={build.JOBSET_VERSION}" in comp.ldflags
    assert not comp.source_edits
    assert set(comp.assets.values()) == {"crds", "webhook", "webhook/patches"}
    assert build.binaries()["jobset"] == build.bin_dir(comp) / "jobset"


def test_argv_names_the_config_and_kubeconfig_and_leaves_ports_to_the_config():
    binary = Path("/cache/bin/jobset-v0.12.0/jobset")
    argv = jobset.argv(binary)
    assert argv[0] == str(binary)
    assert f"--config={jobset.CONFIG}" in argv
    assert f"--kubeconfig={cluster.KUBECONFIG}" in argv
    # flags would override the config file's ports and leader election
    assert not [a for a in argv if a.startswith(("--metrics-bind", "--health-probe", "--leader"))]


def test_config_serves_on_loopback_ports_after_kueues_without_leader_election(monkeypatch):
    monkeypatch.setenv("LOCALCLUSTER_PORT", "7443")
    cfg = jobset.config()
    assert cfg["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 7449, "certDir": str(jobset.CERT_DIR)}
    assert cfg["health"] == {"healthProbeBindAddress": "127.0.0.1:7450"}
    assert cfg["metrics"] == {"bindAddress": "127.0.0.1:7451", "certDir": str(jobset.CERT_DIR)}
    taken = {7443, *cluster.etcd_ports(), *cluster.kueue_ports()}
    assert not taken & set(cluster.jobset_ports())


def test_the_crd_file_is_found_by_its_controller_gen_name(assets):
    assert jobset.crd_files() == {
        "jobsets.jobset.x-k8s.io": assets / "crds" / "jobset.x-k8s.io_jobsets.yaml"
    }
    (assets / "crds" / "jobset.x-k8s.io_jobsetgroups.yaml").write_text(crd_text(["v1alpha2"]))
    with pytest.raises(cluster.ClusterError, match="expected only jobsets"):
        jobset.crd_files()


def test_the_crd_carries_the_digest_of_its_file(assets):
    digest, path = jobset.crd()
    doc = jobset.crd_doc(path, digest)
    assert doc["metadata"]["annotations"][jobset.DIGEST_ANNOTATION] == digest
    assert "conversion" not in doc["spec"]  # one version: no /convert webhook
    path.write_text(crd_text(["v1alpha2"]) + "# changed\n")
    assert jobset.crd()[0] != digest


def test_a_crd_serving_a_second_version_is_refused(assets):
    path = assets / "crds" / "jobset.x-k8s.io_jobsets.yaml"
    path.write_text(crd_text(["v1alpha2", "v1beta1"]))
    digest, path = jobset.crd()
    with pytest.raises(cluster.ClusterError, match="expected only v1alpha2"):
        jobset.crd_doc(path, digest)


def test_webhooks_point_at_the_local_process_and_pod_hooks_see_only_jobset_pods(assets):
    docs = {d["metadata"]["name"]: d for d in jobset.webhook_configurations()}
    assert set(docs) == {jobset.MUTATING, jobset.VALIDATING}
    assert docs[jobset.MUTATING]["kind"] == "MutatingWebhookConfiguration"
    hooks = {h["name"]: h for d in docs.values() for h in d["webhooks"]}
    assert set(hooks) == {"mjobset.kb.io", "mpod.kb.io", "vjobset.kb.io", "vpod.kb.io"}
    for name, hook in hooks.items():
        assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:7449/"), name
        assert hook["clientConfig"]["caBundle"] == "bm90IGEgcmVhbCBDQQ=="  # the CA, base64
        assert "service" not in hook["clientConfig"]
        assert hook["failurePolicy"] == "Fail"
    assert hooks["mpod.kb.io"]["clientConfig"]["url"].endswith("/mutate--v1-pod")
    only_jobset_pods = {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    }
    assert hooks["mpod.kb.io"]["objectSelector"] == only_jobset_pods
    assert hooks["vpod.kb.io"]["objectSelector"] == only_jobset_pods
    assert "objectSelector" not in hooks["vjobset.kb.io"]


def test_a_patch_op_other_than_replace_fails_loudly(assets):
    patch = assets / "webhook" / "patches" / "mutating-patch.yaml"
    patch.write_text(patch.read_text().replace("op: replace", "op: add"))
    with pytest.raises(cluster.ClusterError, match="'add' is not handled"):
        jobset.webhook_configurations()


def test_jobset_starts_before_kueue_and_restarts_when_its_config_changes(monkeypatch, tmp_path):
    monkeypatch.setattr(components, "write_scheduler_config", lambda: tmp_path / "s.yaml")
    names = [c.name for c in components.component_specs(build.binaries())]
    assert names.index("kube-apiserver") < names.index("jobset") < names.index("kueue")
    (spec,) = [c for c in components.component_specs(build.binaries()) if c.name == "jobset"]
    assert spec.argv == jobset.argv(build.binaries()["jobset"])
    version = cluster._code_version(spec)
    assert version and version == cluster._code_version(spec)
    monkeypatch.setenv("LOCALCLUSTER_PORT", "7443")
    assert cluster._code_version(spec) != version
