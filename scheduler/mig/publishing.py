"""The configs a rollout publishes before it relabels nodes: every mig-parted config and
device-plugin config the portal knows, as ConfigMaps in the GPU operator's namespace, which the
MIG manager and the device plugin read (the local cluster's simulator too)."""

from __future__ import annotations

import yaml
from django.conf import settings

from core import audit
from scheduler.cluster.kube import KubeGateway
from scheduler.cluster.render.labels import MANAGED_BY, MANAGED_BY_LABEL
from scheduler.mig import proposals
from scheduler.mig.models import DevicePluginConfig, MigConfig, Plan

CONFIG_KIND_LABEL = "gpu-portal/config"


def operator_namespace() -> str:
    return settings.GPU_OPERATOR_NAMESPACE


def config_map_name(kind: str) -> str:
    return f"gpu-portal-{settings.PORTAL_INSTANCE}-{kind}-config"


def config_manifests(
    mig_configs: dict[str, list[dict]], device_plugin_configs: dict[str, dict]
) -> list[dict]:
    """The operator namespace and the two ConfigMaps the MIG manager and the device plugin
    read (pure). mig-parted takes one file; the device plugin one file per config name."""
    ns = operator_namespace()
    labels = {MANAGED_BY_LABEL: MANAGED_BY}

    def config_map(kind: str, data: dict[str, str]) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": config_map_name(kind),
                "namespace": ns,
                "labels": {**labels, CONFIG_KIND_LABEL: kind},
            },
            "data": data,
        }

    mig_file = {"version": "v1", "mig-configs": dict(sorted(mig_configs.items()))}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        config_map("mig-parted", {"config.yaml": yaml.safe_dump(mig_file, sort_keys=False)}),
        config_map(
            "device-plugin",
            {
                name: yaml.safe_dump(cfg, sort_keys=False)
                for name, cfg in device_plugin_configs.items()
            },
        ),
    ]


def publish_configs(kube: KubeGateway, plan: Plan, actor=None) -> None:
    for name, entries in plan.mig_configs.items():
        MigConfig.objects.get_or_create(name=name, defaults={"entries": entries})
    for name, config in plan.device_plugin_configs.items():
        DevicePluginConfig.objects.get_or_create(name=name, defaults={"config": config})
    # every config published so far stays: nodes of earlier plans still name theirs
    for manifest in config_manifests(
        proposals.known_mig_configs(), proposals.known_device_plugin_configs()
    ):
        kube.apply(manifest)
    audit.record(
        actor=actor,
        verb="plan.configs_published",
        obj=plan,
        tenant=None,
        after={
            "namespace": operator_namespace(),
            "generated": sorted(plan.mig_configs),
            "generated_device_plugin": sorted(plan.device_plugin_configs),
        },
    )


def device_plugin_configs() -> dict[str, dict]:
    """The portal's named device-plugin configs (the file beside the GPU catalog)."""
    return proposals.file_device_plugin_configs()
