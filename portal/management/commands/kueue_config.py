"""Print the part of Kueue's Configuration this portal relies on (docs/deploy.md), for
GPU_QUOTA_UNIT, KUEUE_INTEGRATIONS and KUEUE_PODS_READY_* as set: merge it into Kueue's own (its
Helm value `managerConfig.controllerManagerConfigYaml`). The chart ships the default one as
files/kueue-configuration.yaml; a test keeps the two the same."""

import yaml
from django.core.management.base import BaseCommand

from scheduler.cluster.kueue_settings import expected_configuration


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
        parser.add_argument(
            "--manager",
            action="store_true",
            help="for a fleet's manager: add MultiKueue's incremental dispatcher (docs/deploy.md)",
        )

    def handle(self, *args, **options):
        fragment = expected_configuration(
            feature_gates=not options["no_feature_gates"], manager=options["manager"]
        )
        self.stdout.write(yaml.safe_dump(fragment, sort_keys=False), ending="")
