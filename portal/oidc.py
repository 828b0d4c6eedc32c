"""Single sign-on: people sign in with the company's OpenID Connect provider. Accounts are
matched and created by the username claim (the same name RoleBindings use for the user)."""

from django.conf import settings
from mozilla_django_oidc.auth import OIDCAuthenticationBackend


class PortalOIDCBackend(OIDCAuthenticationBackend):
    def _username(self, claims) -> str:
        return claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email", "")

    def filter_users_by_claims(self, claims):
        username = self._username(claims)
        if not username:
            return self.UserModel.objects.none()
        return self.UserModel.objects.filter(username=username)

    def create_user(self, claims):
        return self.UserModel.objects.create_user(
            username=self._username(claims),
            email=claims.get("email", ""),
            first_name=claims.get("given_name", ""),
            last_name=claims.get("family_name", ""),
        )

    def update_user(self, user, claims):
        user.email = claims.get("email", user.email)
        user.save(update_fields=["email"])
        return user
