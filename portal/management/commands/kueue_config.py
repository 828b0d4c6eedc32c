"""Print the part of Kueue's Configuration this portal relies on (docs/deploy.md), for
GPU_QUOTA_UNIT, KUEUE_INTEGRATIONS and KUEUE_PODS_READY_* as set: merge it into Kueue's own (its
Helm value `managerConfig.controllerManagerConfigYaml`). The chart ships the default one as
files/kueue-configuration.yaml; a test keeps the two the same."""

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand

from catalog.kueue_config import PodsReady, kueue_configuration


class Command(BaseCommand):
    help = (
        "Print the Kueue Configuration fragment the portal needs (queue enforcement, slices, "
        "fair sharing, gangs)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-feature-gates",
            action="store_true",
            help="leave featureGates out (for a Kueue given them by --feature-gates)",
        )

    def handle(self, *args, **options):
        fragment = kueue_configuration(
            settings.GPU_QUOTA_UNIT,
            feature_gates=not options["no_feature_gates"],
            pods_ready=PodsReady(
                timeout_s=settings.KUEUE_PODS_READY_TIMEOUT_S,
                requeue_base_s=settings.KUEUE_PODS_READY_REQUEUE_BASE_S,
                requeue_max_s=settings.KUEUE_PODS_READY_REQUEUE_MAX_S,
                requeue_limit=settings.KUEUE_PODS_READY_REQUEUE_LIMIT,
                block_admission=settings.KUEUE_PODS_READY_BLOCK_ADMISSION,
            ),
            integrations=settings.KUEUE_INTEGRATIONS,
        )
        self.stdout.write(yaml.safe_dump(fragment, sort_keys=False), ending="")
