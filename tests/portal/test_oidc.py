"""Single sign-on is off by default and, when configured, sends people to the provider; accounts
are bound to the provider's subject, and SSO never takes over a robot, admin or unlinked account."""

import os
import subprocess
import sys
from io import StringIO
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.contrib.messages.storage.cookie import CookieStorage
from django.contrib.sessions.backends.db import SessionStore
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.core.management import CommandError, call_command
from django.test import RequestFactory
from django.urls import NoReverseMatch, reverse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.models import OIDCIdentity
from portal.oidc import PortalOIDCBackend, SignInRefused
from tenants.models import AuditEvent, Tenant
from tests.tenants.factories import PlatformAdminFactory, UserFactory

User = get_user_model()


def test_off_by_default(client, db):
    body = client.get(reverse("login")).content.decode()
    assert "single sign-on" not in body
    try:
        reverse("oidc_authentication_init")
        raise AssertionError("the OIDC urls should not exist when it is off")
    except NoReverseMatch:
        pass


def test_configured_sign_in_redirects_to_the_provider():
    # Settings are read at start-up, so this runs a fresh process configured for a provider.
    script = """
import django
django.setup()
from django.test import Client
from django.urls import reverse
client = Client()
assert "Sign in with single sign-on" in client.get(reverse("login")).content.decode()
response = client.get(reverse("oidc_authentication_init"))
print(response.status_code, response["Location"])
"""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "ALLOWED_HOSTS": "testserver",
        "SESSION_ENGINE": "django.contrib.sessions.backends.signed_cookies",
        "OIDC_RP_CLIENT_ID": "gpu-portal",
        "OIDC_RP_CLIENT_SECRET": "s3cret",
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.com/authorize",
        "OIDC_OP_TOKEN_ENDPOINT": "https://sso.example.com/token",
        "OIDC_OP_USER_ENDPOINT": "https://sso.example.com/userinfo",
        "OIDC_OP_JWKS_ENDPOINT": "https://sso.example.com/jwks",
    }
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    status, location = int(out[0]), urlparse(out[1])
    assert status == 302
    assert (location.netloc, location.path) == ("sso.example.com", "/authorize")
    query = parse_qs(location.query)
    assert query["client_id"] == ["gpu-portal"] and "openid" in query["scope"][0]


# --- Accounts are bound to the provider's subject, never matched by name or e-mail -------------

ISSUER = "https://sso.example.com"


@pytest.fixture
def backend(settings, db):
    settings.OIDC_RP_CLIENT_ID = "gpu-portal"
    settings.OIDC_RP_CLIENT_SECRET = "s3cret"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{ISSUER}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{ISSUER}/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{ISSUER}/jwks"
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.OIDC_USERNAME_CLAIM = "preferred_username"
    settings.OIDC_OP_ISSUER = ISSUER
    return PortalOIDCBackend()


def claims(sub="sub-dana", username="dana", **extra):
    return {
        "sub": sub,
        "preferred_username": username,
        "email": f"{username}@corp.example",
        **extra,
    }


def sso(backend, monkeypatch, info):
    """What the callback does once the provider answered: userinfo in, account out."""
    monkeypatch.setattr(OIDCAuthenticationBackend, "get_userinfo", lambda *a: info)
    return backend.get_or_create_user("access", "id-token", {"sub": info.get("sub")})


def test_a_first_sign_in_creates_an_account_bound_to_the_subject(backend, monkeypatch):
    user = sso(backend, monkeypatch, claims())
    assert (user.username, user.email) == ("dana", "dana@corp.example")
    identity = OIDCIdentity.objects.get(issuer=ISSUER, subject="sub-dana")
    assert identity.user == user
    event = AuditEvent.objects.get(verb="sso.account_created")
    assert event.object_id == str(user.pk) and event.after["subject"] == "sub-dana"


def test_the_subject_finds_the_account_again_whatever_the_name_and_e_mail(backend, monkeypatch):
    first = sso(backend, monkeypatch, claims())
    again = sso(backend, monkeypatch, claims(username="dana.renamed", email="d@corp.example"))
    assert again == first and again.email == "d@corp.example"
    assert User.objects.filter(username__startswith="dana").count() == 1


def test_a_provider_user_named_like_a_local_account_does_not_get_it(backend, monkeypatch):
    carol = UserFactory(username="carol")
    with pytest.raises(SignInRefused, match="not linked to your single sign-on identity"):
        backend.filter_users_by_claims(claims(sub="someone-else", username="carol"))
    with pytest.raises(PermissionDenied, match="ask a platform admin to link"):
        sso(backend, monkeypatch, claims(sub="someone-else", username="Carol"))
    assert not OIDCIdentity.objects.exists()
    refused = AuditEvent.objects.filter(verb="sso.sign_in_refused").first()
    assert refused.object_id == str(carol.pk) and refused.after["subject"] == "someone-else"


def test_an_e_mail_claim_does_not_match_a_local_account(backend, monkeypatch):
    carol = UserFactory(username="carol", email="carol@corp.example")
    user = sso(
        backend, monkeypatch, claims(sub="c-2", username="carol2", email="carol@corp.example")
    )
    assert user != carol and user.username == "carol2"


@pytest.mark.parametrize(
    "make",
    [
        lambda: UserFactory(username="admin", is_superuser=True, is_staff=True),
        lambda: UserFactory(username="admin", is_staff=True),
        lambda: PlatformAdminFactory(username="admin"),
    ],
)
def test_local_administrator_accounts_are_never_claimed(backend, monkeypatch, make):
    make()
    with pytest.raises(SignInRefused, match="local administrator account"):
        sso(backend, monkeypatch, claims(sub="evil", username="admin"))
    assert not OIDCIdentity.objects.exists()


def test_robot_accounts_and_their_names_are_never_claimed(backend, monkeypatch, world):
    robot = User.objects.create_user(username="robot-team-a")
    Tenant.objects.filter(pk=world.tenant.pk).update(robot=robot)
    with pytest.raises(SignInRefused, match="CI robot"):
        sso(backend, monkeypatch, claims(sub="evil", username="robot-team-a"))
    # a future team's robot name, too: creating that team would find its name taken
    with pytest.raises(SignInRefused, match="reserved for the CI robots"):
        backend.filter_users_by_claims(claims(sub="evil", username="robot-team-z"))
    # and a binding that somehow points at a robot signs nobody in
    OIDCIdentity.objects.create(issuer=ISSUER, subject="bound", user=robot)
    with pytest.raises(SignInRefused, match="CI robot"):
        backend.filter_users_by_claims(claims(sub="bound", username="whatever"))


def test_the_same_subject_at_another_provider_is_another_person(backend, monkeypatch, settings):
    dana = sso(backend, monkeypatch, claims())
    settings.OIDC_OP_ISSUER = "https://other-sso.example.com"
    with pytest.raises(SignInRefused, match="not linked"):
        sso(PortalOIDCBackend(), monkeypatch, claims())
    assert OIDCIdentity.objects.get().user == dana


def test_claims_without_a_subject_or_a_name_are_refused(backend):
    assert backend.verify_claims(claims()) is True
    assert backend.verify_claims({k: v for k, v in claims().items() if k != "sub"}) is False
    assert backend.verify_claims(claims(sub="")) is False
    assert backend.verify_claims(claims(sub=42)) is False
    nameless = {"sub": "x"}
    assert backend.verify_claims(nameless) is False
    assert backend.verify_claims({"sub": "x", "preferred_username": "x"}) is False  # email scope


def test_userinfo_about_another_subject_is_not_used(backend, monkeypatch):
    monkeypatch.setattr(OIDCAuthenticationBackend, "get_userinfo", lambda *a: claims(sub="b"))
    with pytest.raises(SuspiciousOperation, match="sub"):
        backend.get_userinfo("access", "id-token", {"sub": "a"})


def test_create_user_binds_and_audits(backend):
    user = backend.create_user(claims(sub="s-9", username="erin"))
    assert OIDCIdentity.objects.get(subject="s-9").user == user
    assert AuditEvent.objects.filter(verb="sso.account_created", object_id=str(user.pk)).exists()


def test_a_platform_admin_links_an_existing_account(backend, monkeypatch, world):
    carol = UserFactory(username="carol")
    call_command("link_oidc_identity", "carol", "sub-carol", stdout=StringIO())
    assert sso(backend, monkeypatch, claims(sub="sub-carol", username="carol")) == carol
    assert AuditEvent.objects.filter(verb="sso.identity_linked", object_id=str(carol.pk))
    UserFactory(username="bob")
    with pytest.raises(CommandError, match="already linked"):
        call_command("link_oidc_identity", "bob", "sub-carol", stdout=StringIO())
    robot = User.objects.create_user(username="robot-team-a")
    Tenant.objects.filter(pk=world.tenant.pk).update(robot=robot)
    with pytest.raises(CommandError, match="CI robot"):
        call_command("link_oidc_identity", "robot-team-a", "sub-r", stdout=StringIO())


def test_sign_in_through_django_with_axes_in_front(backend, monkeypatch, settings):
    """The whole callback path: axes first, then this backend; a refusal is a message on the
    sign-in page, and refusals (no password was guessed) lock nobody out."""
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.oidc.PortalOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    settings.OIDC_AUTHENTICATION_CALLBACK_URL = "login"  # the oidc urls are off in tests
    answers = {"info": claims()}
    monkeypatch.setattr(PortalOIDCBackend, "get_token", lambda self, payload: TOKENS)
    monkeypatch.setattr(PortalOIDCBackend, "verify_token", lambda self, token, **kw: {"sub": "x"})
    monkeypatch.setattr(
        PortalOIDCBackend,
        "get_userinfo",
        lambda self, access, id_token, payload: answers["info"],
    )

    def callback():
        request = RequestFactory().get("/oidc/callback/", {"code": "c", "state": "s"})
        request.session = SessionStore()
        request._messages = CookieStorage(request)
        return request, authenticate(request, nonce="n", code_verifier=None)

    UserFactory(username="admin", is_superuser=True, is_staff=True)
    answers["info"] = claims(sub="evil", username="admin")
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        request, user = callback()
        assert user is None
    assert "local administrator account" in " ".join(str(m) for m in request._messages)
    answers["info"] = claims()
    _, user = callback()
    assert user is not None and user.username == "dana"


TOKENS = {"id_token": "id-token", "access_token": "access"}


def test_configured_settings_put_axes_first_and_bind_to_the_provider():
    script = """
import django
django.setup()
from django.conf import settings
print(",".join(settings.AUTHENTICATION_BACKENDS), settings.OIDC_OP_ISSUER,
      settings.LOGIN_REDIRECT_URL_FAILURE)
"""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "OIDC_RP_CLIENT_ID": "gpu-portal",
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.com/realms/corp/authorize",
        "OIDC_OP_TOKEN_ENDPOINT": "https://sso.example.com/token",
        "OIDC_OP_USER_ENDPOINT": "https://sso.example.com/userinfo",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0].split(",") == [
        "axes.backends.AxesStandaloneBackend",
        "portal.oidc.PortalOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    assert out[1:] == ["https://sso.example.com", "login"]


def test_platform_admins_see_the_links_in_the_admin_but_cannot_type_one(backend, client):
    dana = backend.create_user(claims())
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:portal_oidcidentity_changelist"))
    assert page.status_code == 200 and "sub-dana" in page.content.decode()
    assert client.get(reverse("admin:portal_oidcidentity_add")).status_code == 403
    assert dana.oidc_identities.get().issuer == ISSUER


def test_a_deactivated_person_signed_in_by_sso_is_signed_out_at_the_next_request(
    backend, monkeypatch, settings, client
):
    """Security, third pass (4): the session named the user and the backend found them
    whatever their state; now a deactivated account's session ends at its next request."""
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.oidc.PortalOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    user = sso(backend, monkeypatch, claims())
    client.force_login(user, backend="portal.oidc.PortalOIDCBackend")
    assert client.get("/").status_code == 200
    user.is_active = False
    user.save(update_fields=["is_active"])
    answer = client.get("/")
    assert answer.status_code == 302 and "/accounts/login/" in answer["Location"], answer
    assert backend.get_user(user.pk) is None
