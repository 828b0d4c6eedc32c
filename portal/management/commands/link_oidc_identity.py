"""`manage.py link_oidc_identity USERNAME SUB`: let the person the single sign-on provider knows
as SUB sign in to the existing account USERNAME (single sign-on never takes over an account by
its name)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.oidc import SignInRefused, link_identity


class Command(BaseCommand):
    help = "Link an existing account to a person at the single sign-on provider (their `sub`)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("subject", help="the provider's `sub` claim for that person")
        parser.add_argument("--issuer", default=None, help="default: OIDC_OP_ISSUER")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        try:
            identity = link_identity(
                actor=None, user=user, subject=options["subject"], issuer=options["issuer"]
            )
        except SignInRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{user.username} is now linked to {identity}")
