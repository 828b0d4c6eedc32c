"""Print the part of Kueue's Configuration this portal relies on (docs/deploy.md), for
GPU_QUOTA_UNIT, KUEUE_INTEGRATIONS and KUEUE_PODS_READY_* as set: merge it into Kueue's own (its
Helm value `managerConfig.controllerManagerConfigYaml`). The chart ships the default one as
files/kueue-configuration.yaml; a test keeps the two the same."""

import yaml
from django.core.management.base import BaseCommand, CommandError

from catalog.kueue_config import DEFAULT_DISPATCH_STEP
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
        parser.add_argument(
            "--dispatch-step",
            type=int,
            default=DEFAULT_DISPATCH_STEP,
            help="with --manager: workers nominated per five-minute round, in the platform's "
            f"order (default {DEFAULT_DISPATCH_STEP}; 1: strictly one at a time)",
        )

        parser.add_argument(
            "--worker-lost-timeout",
            type=int,
            default=None,
            help="with --manager: seconds MultiKueue keeps work on a worker that does not answer "
            "before it requeues it (Kueue's default: 900)",
        )

    def handle(self, *args, **options):
        try:
            fragment = expected_configuration(
                feature_gates=not options["no_feature_gates"],
                dispatch_step=options["dispatch_step"] if options["manager"] else None,
                worker_lost_s=options["worker_lost_timeout"] if options["manager"] else None,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(yaml.safe_dump(fragment, sort_keys=False), ending="")
