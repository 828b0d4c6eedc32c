"""`manage.py erase_person USERNAME`: replace a departed person's personal data with a pseudonym
in every table (portal/erasure.py); `--dry-run` reports what it would change and changes nothing."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from portal.erasure import erase_person


class Command(BaseCommand):
    help = "Erase a departed person's personal data (a pseudonym everywhere; audited)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--dry-run", action="store_true", help="report, change nothing")

    def handle(self, *args, **options):
        try:
            done = erase_person(
                actor=None, username=options["username"], dry_run=options["dry_run"]
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        verb = "would become" if options["dry_run"] else "is now"
        self.stdout.write(f"{options['username']} {verb} {done.pseudonym}")
        for label, count in sorted(done.rewritten.items()):
            self.stdout.write(f"  rewritten {label}: {count}")
        for label, count in sorted(done.deleted.items()):
            if count:
                self.stdout.write(f"  deleted {label}: {count}")
        self.stdout.write(f"  teams left: {', '.join(done.teams) or '-'}")
        self.stdout.write(f"  tokens revoked: {done.tokens_revoked}")
        for label, count in sorted(done.left.items()):
            self.stderr.write(f"  left in a cluster name, not rewritten: {label}: {count} rows")
