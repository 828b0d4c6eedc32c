"""Single sign-on: people sign in with the company's OpenID Connect provider. An account is bound
to the provider's stable subject (`sub`, `OIDCIdentity`) when single sign-on creates it, and found
by that binding only: a provider user named like a local account (`admin`, `robot-team-a`,
anyone's) is refused, never signed in as it. The username claim names new accounts only (the
same name RoleBindings use for the user). At every sign-in the provider's groups claim sets the
teams, roles and platform admin it gives
(`tenants.services.provider_groups.apply_provider_groups`)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import IntegrityError, transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core import audit
from portal.models import OIDCIdentity
from tenants.models import Tenant
from tenants.services import provider_groups as provider_group_services

# Tenants' CI robots are the users `robot-<slug>` (tenants.services.tenants.create_tenant).
ROBOT_USERNAME_PREFIX = "robot-"


class SignInRefused(PermissionDenied):
    """Single sign-on may not sign in as this account; the message says why and what to do.
    A PermissionDenied, so Django's authenticate() stops at it and reports a failed sign-in."""


def _is_robot(user) -> bool:
    return Tenant.objects.filter(robot=user).exists()


def _is_local_admin(user) -> bool:
    return user.is_superuser or user.is_staff  # platform admins are staff too


def link_identity(*, actor, user, subject: str, issuer: str | None = None) -> OIDCIdentity:
    """Bind an existing account to a person at the provider (`manage.py link_oidc_identity`),
    so that they sign in to it with single sign-on. Never a CI robot."""
    issuer = issuer or getattr(settings, "OIDC_OP_ISSUER", "")
    if not issuer:
        raise SignInRefused("single sign-on is off (OIDC_RP_CLIENT_ID); give the issuer")
    if _is_robot(user):
        raise SignInRefused(f"{user.username!r} is a team's CI robot; it signs in with tokens only")
    with transaction.atomic():
        taken = OIDCIdentity.objects.filter(issuer=issuer).filter(subject=subject).first()
        if taken is not None:
            raise SignInRefused(f"{subject!r} is already linked to {taken.user.username!r}")
        if OIDCIdentity.objects.filter(issuer=issuer, user=user).exists():
            raise SignInRefused(f"{user.username!r} is already linked to an identity at {issuer}")
        identity = OIDCIdentity.objects.create(issuer=issuer, subject=subject, user=user)
        audit.record(
            actor=actor,
            verb="sso.identity_linked",
            obj=user,
            tenant=None,
            after={"issuer": issuer, "subject": subject},
        )
    return identity


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def get_user(self, user_id):
        """The user a session signed in by single sign-on names, unless deactivated since: a
        session is checked at every request, so a person switched off is signed out at their
        next one (Django's ModelBackend does the same for password sessions)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def _username(self, claims) -> str:
        return claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email", "")

    def verify_claims(self, claims) -> bool:
        # Without a subject nobody can be recognised again; without a name no account be made.
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or not self._username(claims):
            return False
        return super().verify_claims(claims)

    def get_userinfo(self, access_token, id_token, payload):
        claims = super().get_userinfo(access_token, id_token, payload)
        # OpenID Connect Core 5.3.2: userinfo about another subject must not be used.
        if payload.get("sub") and claims.get("sub") != payload["sub"]:
            raise SuspiciousOperation("the userinfo sub is not the ID token's sub")
        return claims

    def filter_users_by_claims(self, claims):
        issuer, subject = settings.OIDC_OP_ISSUER, claims["sub"]
        identity = (
            OIDCIdentity.objects.select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is not None:
            if _is_robot(identity.user):
                self._refuse(
                    claims,
                    identity.user,
                    f"{identity.user.username!r} is a team's CI robot account; single sign-on "
                    "never signs in as one. Ask a platform admin to check your account's link.",
                )
            return self.UserModel.objects.filter(pk=identity.user_id)
        username = self._username(claims)
        local = self.UserModel.objects.filter(username__iexact=username).first()
        if local is not None:
            self._refuse(claims, local, self._why_not(local))
        if username.lower().startswith(ROBOT_USERNAME_PREFIX):
            self._refuse(
                claims,
                None,
                f"usernames starting with {ROBOT_USERNAME_PREFIX!r} are reserved for the CI "
                "robots of teams; ask a platform admin to create your account and link it.",
            )
        return self.UserModel.objects.none()

    def _why_not(self, local) -> str:
        name = local.username
        if _is_robot(local):
            return f"{name!r} is a team's CI robot account; single sign-on never signs in as one."
        if _is_local_admin(local):
            return (
                f"{name!r} is a local administrator account; single sign-on never signs in as "
                "one. Sign in with its password, or ask a platform admin to link it."
            )
        return (
            f"an account named {name!r} already exists here and is not linked to your single "
            "sign-on identity; ask a platform admin to link it (manage.py link_oidc_identity)."
        )

    def _refuse(self, claims, user, message: str):
        audit.record(
            actor=None,
            verb="sso.sign_in_refused",
            obj=user,
            tenant=None,
            object_type="auth.User",
            after={
                "issuer": settings.OIDC_OP_ISSUER,
                "subject": claims.get("sub"),
                "username": self._username(claims),
                "reason": message,
            },
        )
        request = getattr(self, "request", None)
        if request is not None:
            messages.error(request, f"Single sign-on refused: {message}", fail_silently=True)
        raise SignInRefused(message)

    def create_user(self, claims):
        try:
            with transaction.atomic():
                user = self.UserModel.objects.create_user(
                    username=self._username(claims),
                    email=claims.get("email", ""),
                    first_name=claims.get("given_name", ""),
                    last_name=claims.get("family_name", ""),
                )
                OIDCIdentity.objects.create(
                    issuer=settings.OIDC_OP_ISSUER, subject=claims["sub"], user=user
                )
                audit.record(
                    actor=user,
                    verb="sso.account_created",
                    obj=user,
                    tenant=None,
                    after={"issuer": settings.OIDC_OP_ISSUER, "subject": claims["sub"]},
                )
        except IntegrityError:
            # A first sign-in of the same person (or name) raced this one: what it would be told.
            raise SignInRefused(
                "your account was being created at the same time; sign in again"
            ) from None
        self._apply_groups(user, claims)
        return user

    def update_user(self, user, claims):
        user.email = claims.get("email", user.email)
        user.save(update_fields=["email"])
        self._apply_groups(user, claims)
        return user

    def _apply_groups(self, user, claims) -> None:
        """Teams, roles and platform admin from the provider's groups, at every sign-in."""
        changed = provider_group_services.apply_provider_groups(user=user, claims=claims)
        request = getattr(self, "request", None)
        if changed and request is not None:
            messages.info(request, f"From your groups: {'; '.join(changed)}.", fail_silently=True)
