"""`manage.py verify_audit`: walk the audit log's hash chain (tenants/audit_chain.py); exit 1
with one line per problem when it does not verify."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tenants import audit_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain (after sealing what is committed, with --seal)."

    def add_arguments(self, parser):
        parser.add_argument("--seal", action="store_true", help="seal pending rows first")

    def handle(self, *args, **options):
        if options["seal"]:
            audit_chain.seal_pending()
        result = audit_chain.verify()
        for problem in result.problems:
            self.stderr.write(problem)
        if not result.ok:
            raise CommandError(f"the audit chain does not verify: {len(result.problems)} problems")
        self.stdout.write(
            f"the audit chain verifies: {result.checked} events from place "
            f"{result.first_seq or '-'}, {result.unsealed} not sealed yet"
        )
