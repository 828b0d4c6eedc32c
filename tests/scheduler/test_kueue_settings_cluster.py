"""Kueue's enforcement settings on the local cluster (issue 48): the local Kueue publishes its
Configuration where a real install keeps it, the portal reads it as the chart's ServiceAccount
and finds nothing missing; with manageJobsWithoutQueueName taken out of that ConfigMap, the
reconcile's check says so in /readyz, the console and the remembered verdict."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from catalog import kueue_integrations
from localcluster import kueue as local_kueue
from scheduler.cluster import kueue_settings
from scheduler.cluster.reconcile.runs import reconcile_cluster_objects

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def _config_map(kube_admin) -> dict:
    cm = kube_admin.get("ConfigMap", local_kueue.CONFIG_MAP, local_kueue.CONFIG_NAMESPACE)
    assert cm is not None, "the local cluster's Kueue publishes its Configuration (kueue.prepare)"
    return cm


def test_the_portal_reads_the_local_kueues_configuration_and_finds_nothing_missing(
    kube, kube_admin
):
    published = yaml.safe_load(_config_map(kube_admin)["data"][kueue_settings.CONFIG_KEY])
    assert published == local_kueue.config()  # what the process runs with

    verdict = kube.kueue_settings.verdict(fresh=True)  # as the chart's ServiceAccount

    assert verdict.missing == (), [m.detail for m in verdict.missing]
    assert verdict.usable == kueue_integrations.LOCAL_CLUSTER  # JobSet's CRD is installed
    assert kueue_settings.remembered() == verdict.as_dict()


def test_a_configuration_without_manage_jobs_without_queue_name_is_reported(
    kube, kube_admin, client, world
):
    original = _config_map(kube_admin)
    config = yaml.safe_load(original["data"][kueue_settings.CONFIG_KEY])
    del config["manageJobsWithoutQueueName"]
    lacking = local_kueue.config_map(yaml.safe_dump(config, sort_keys=False))
    try:
        kube_admin.apply(lacking)  # Kueue reads its file: only what the portal reads changes

        reconcile_cluster_objects(kube)  # every reconcile's cluster-wide part reads it again

        remembered = kueue_settings.remembered()
        assert remembered is not None and remembered["holds"] is False
        assert [m["setting"] for m in remembered["missing"]] == ["manageJobsWithoutQueueName"]
        ready = client.get(reverse("readyz"))
        assert ready.status_code == 200  # said, not failed
        body = ready.json()
        assert body["checks"]["cluster"] == "ok"
        (reason,) = body["kueue_settings"]
        assert "lacks manageJobsWithoutQueueName: true" in reason
        client.force_login(world.admin)
        assert "lacks manageJobsWithoutQueueName" in client.get(reverse("home")).content.decode()
    finally:
        kube_admin.apply(local_kueue.config_map(original["data"][kueue_settings.CONFIG_KEY]))
    assert kube.kueue_settings.verdict(fresh=True).holds
