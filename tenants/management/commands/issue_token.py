"""`manage.py issue_token USER --scopes read,submit --expires-in 30d [--name ci]`: prints the
secret once (it is stored only as a hash)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.errors import ServiceError
from tenants.services import tokens as token_services

_DURATION = re.compile(r"^(\d+)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise CommandError(f"--expires-in {text!r}: use e.g. 90m, 12h, 30d or 4w")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


class Command(BaseCommand):
    help = "Issue an API token for a user (a person or a tenant's CI robot); prints it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--scopes", default="read", help="comma-separated: read,request,submit,approve,admin"
        )
        parser.add_argument("--expires-in", default="30d", help="e.g. 12h, 30d; 'never' for none")
        parser.add_argument("--name", default="cli", help="what the token is for")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        expires_at = None
        if options["expires_in"] != "never":
            expires_at = timezone.now() + parse_duration(options["expires_in"])
        scopes = [s.strip() for s in options["scopes"].split(",") if s.strip()]
        try:
            # The command runs with the platform's authority (whoever can run manage.py).
            token, raw = token_services.issue_token(
                actor=None, user=user, name=options["name"], scopes=scopes, expires_at=expires_at
            )
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        self.stderr.write(
            f"token {token.prefix}… for {user.get_username()} scopes={','.join(token.scopes)} "
            f"expires={token.expires_at or 'never'}; it is shown only now:"
        )
        self.stdout.write(raw)
